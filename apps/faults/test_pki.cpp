#include "faults/test_pki.hpp"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string_view>

namespace coretry::faults {
namespace {

template <auto Free> struct openssl_deleter {
  template <class T> void operator()(T* object) const noexcept { Free(object); }
};
using key_ptr = std::unique_ptr<EVP_PKEY, openssl_deleter<EVP_PKEY_free>>;
using certificate_ptr = std::unique_ptr<X509, openssl_deleter<X509_free>>;
using extension_ptr = std::unique_ptr<X509_EXTENSION, openssl_deleter<X509_EXTENSION_free>>;
using general_names_ptr = std::unique_ptr<GENERAL_NAMES, openssl_deleter<GENERAL_NAMES_free>>;
using general_name_ptr = std::unique_ptr<GENERAL_NAME, openssl_deleter<GENERAL_NAME_free>>;
using ia5_string_ptr = std::unique_ptr<ASN1_IA5STRING, openssl_deleter<ASN1_IA5STRING_free>>;
using octet_string_ptr = std::unique_ptr<ASN1_OCTET_STRING, openssl_deleter<ASN1_OCTET_STRING_free>>;
using bio_ptr = std::unique_ptr<BIO, openssl_deleter<BIO_free_all>>;

// Throws with the failed step and OpenSSL's queued reasons, and empties the
// queue so that the next failure does not report stale reasons.
[[noreturn]] void fail(std::string_view step) {
  std::string message = "test PKI: ";
  message += step;
  message += " failed";
  while (const unsigned long code = ERR_get_error()) {
    char reason[256];
    ERR_error_string_n(code, reason, sizeof reason);
    message += "; ";
    message += reason;
  }
  throw std::runtime_error(message);
}

void require(bool ok, std::string_view step) {
  if (!ok) fail(step);
}

key_ptr generate_p256_key() {
  key_ptr key{EVP_EC_gen("P-256")};
  require(key != nullptr, "EC P-256 key generation");
  return key;
}

void set_random_serial(X509* certificate) {
  std::uint64_t serial = 0;
  require(RAND_bytes(reinterpret_cast<unsigned char*>(&serial), sizeof serial) == 1, "serial number generation");
  // Positive and non-zero, as RFC 5280 requires.
  serial = (serial >> 1) | 1;
  require(ASN1_INTEGER_set_uint64(X509_get_serialNumber(certificate), serial) == 1, "setting the serial number");
}

void set_subject(X509* certificate, std::string_view common_name) {
  X509_NAME* name = X509_get_subject_name(certificate);
  const auto add = [name](const char* field, std::string_view value) {
    require(X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(value.data()),
                                       static_cast<int>(value.size()), -1, 0) == 1,
            "setting the subject name");
  };
  add("O", "coretry test PKI");
  add("CN", common_name);
}

void set_validity(X509* certificate, std::chrono::seconds not_before, std::chrono::seconds not_after) {
  require(X509_time_adj_ex(X509_getm_notBefore(certificate), 0, static_cast<long>(not_before.count()), nullptr) !=
              nullptr,
          "setting notBefore");
  require(X509_time_adj_ex(X509_getm_notAfter(certificate), 0, static_cast<long>(not_after.count()), nullptr) !=
              nullptr,
          "setting notAfter");
}

// `issuer` may equal `subject` for a self-signed certificate.
void add_extension(X509* subject, X509* issuer, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx(&context, issuer, subject, nullptr, nullptr, 0);
  extension_ptr extension{X509V3_EXT_nconf_nid(nullptr, &context, nid, value)};
  require(extension != nullptr, "building a certificate extension");
  require(X509_add_ext(subject, extension.get(), -1) == 1, "adding a certificate extension");
}

// Built as objects rather than as a configuration string so that a name
// containing a separator cannot turn into a different entry.
void add_subject_alternative_names(X509* certificate, const pki_options& options) {
  general_names_ptr names{GENERAL_NAMES_new()};
  require(names != nullptr, "allocating subjectAltName");
  const auto push = [&](general_name_ptr name) {
    require(sk_GENERAL_NAME_push(names.get(), name.get()) > 0, "adding a subjectAltName entry");
    name.release(); // now owned by `names`
  };
  for (const std::string& dns_name : options.dns_names) {
    ia5_string_ptr text{ASN1_IA5STRING_new()};
    require(text != nullptr && ASN1_STRING_set(text.get(), dns_name.data(), static_cast<int>(dns_name.size())) == 1,
            "encoding a DNS name");
    general_name_ptr name{GENERAL_NAME_new()};
    require(name != nullptr, "allocating a DNS name");
    GENERAL_NAME_set0_value(name.get(), GEN_DNS, text.release());
    push(std::move(name));
  }
  for (const std::string& address : options.ip_addresses) {
    octet_string_ptr bytes{a2i_IPADDRESS(address.c_str())};
    if (!bytes) throw std::invalid_argument("test PKI: not an IP address: '" + address + "'");
    general_name_ptr name{GENERAL_NAME_new()};
    require(name != nullptr, "allocating an IP address name");
    GENERAL_NAME_set0_value(name.get(), GEN_IPADD, bytes.release());
    push(std::move(name));
  }
  if (sk_GENERAL_NAME_num(names.get()) == 0) return; // a certificate no host name can match
  require(X509_add1_ext_i2d(certificate, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) == 1,
          "adding subjectAltName");
}

certificate_ptr new_certificate(EVP_PKEY* key, std::string_view common_name, std::chrono::seconds not_before,
                                std::chrono::seconds not_after) {
  certificate_ptr certificate{X509_new()};
  require(certificate != nullptr, "allocating a certificate");
  require(X509_set_version(certificate.get(), X509_VERSION_3) == 1, "setting the certificate version");
  set_random_serial(certificate.get());
  set_subject(certificate.get(), common_name);
  set_validity(certificate.get(), not_before, not_after);
  require(X509_set_pubkey(certificate.get(), key) == 1, "setting the public key");
  return certificate;
}

void sign(X509* certificate, X509* issuer, EVP_PKEY* issuer_key) {
  require(X509_set_issuer_name(certificate, X509_get_subject_name(issuer)) == 1, "setting the issuer name");
  require(X509_sign(certificate, issuer_key, EVP_sha256()) > 0, "signing a certificate");
}

template <class Write> std::string to_pem(Write write) {
  bio_ptr bio{BIO_new(BIO_s_mem())};
  require(bio != nullptr, "allocating a memory BIO");
  require(write(bio.get()) == 1, "writing PEM");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  require(size > 0 && data != nullptr, "reading PEM");
  return std::string(data, static_cast<std::size_t>(size));
}

std::string certificate_pem(X509* certificate) {
  return to_pem([certificate](BIO* bio) { return PEM_write_bio_X509(bio, certificate); });
}

std::string private_key_pem(EVP_PKEY* key, const std::string& password = {}) {
  if (password.empty())
    return to_pem([key](BIO* bio) { return PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr); });
  return to_pem([key, &password](BIO* bio) {
    return PEM_write_bio_PKCS8PrivateKey(bio, key, EVP_aes_256_cbc(), password.data(), static_cast<int>(password.size()),
                                         nullptr, nullptr);
  });
}

} // namespace

test_pki generate_test_pki(const pki_options& options) {
  ERR_clear_error();

  const key_ptr ca_key = generate_p256_key();
  const certificate_ptr ca = new_certificate(ca_key.get(), "coretry test CA", -std::chrono::hours{24},
                                             std::chrono::hours{24 * 365});
  add_extension(ca.get(), ca.get(), NID_basic_constraints, "critical,CA:TRUE");
  add_extension(ca.get(), ca.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
  add_extension(ca.get(), ca.get(), NID_subject_key_identifier, "hash");
  sign(ca.get(), ca.get(), ca_key.get());

  const key_ptr server_key = generate_p256_key();
  const certificate_ptr server =
      new_certificate(server_key.get(), options.common_name, options.not_before, options.not_after);
  X509* const issuer = options.signed_by_ca ? ca.get() : server.get();
  EVP_PKEY* const issuer_key = options.signed_by_ca ? ca_key.get() : server_key.get();
  add_extension(server.get(), server.get(), NID_basic_constraints, "critical,CA:FALSE");
  add_extension(server.get(), server.get(), NID_key_usage, "critical,digitalSignature");
  add_extension(server.get(), server.get(), NID_ext_key_usage, "serverAuth");
  add_extension(server.get(), server.get(), NID_subject_key_identifier, "hash");
  add_extension(server.get(), issuer, NID_authority_key_identifier, "keyid:always");
  add_subject_alternative_names(server.get(), options);
  sign(server.get(), issuer, issuer_key);

  test_pki pki{certificate_pem(ca.get()), certificate_pem(server.get()), private_key_pem(server_key.get()), {}, {}};
  if (options.client_certificate) {
    const key_ptr client_key = generate_p256_key();
    const certificate_ptr client =
        new_certificate(client_key.get(), "coretry test client", options.not_before, options.not_after);
    add_extension(client.get(), client.get(), NID_basic_constraints, "critical,CA:FALSE");
    add_extension(client.get(), client.get(), NID_key_usage, "critical,digitalSignature");
    add_extension(client.get(), client.get(), NID_ext_key_usage, "clientAuth");
    add_extension(client.get(), ca.get(), NID_authority_key_identifier, "keyid:always");
    sign(client.get(), ca.get(), ca_key.get());
    pki.client_cert_pem = certificate_pem(client.get());
    pki.client_key_pem = private_key_pem(client_key.get(), options.client_key_password);
  }
  return pki;
}

} // namespace coretry::faults
