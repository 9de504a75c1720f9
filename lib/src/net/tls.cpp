#include <coretry/net/tls.hpp>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <unistd.h>

namespace coretry::net {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using boost::system::error_code;

namespace {

std::optional<std::string> unreadable(const std::string& what, const std::string& path) {
  if (::access(path.c_str(), R_OK) != 0) return "cannot read the " + what + " '" + path + "': " + std::strerror(errno);
  return std::nullopt;
}

/// OpenSSL 3.0 works out a certificate's extensions (key identifiers, CA
/// flag, purposes) the first time a verification needs them and stores them
/// in the certificate. A trusted certificate is shared by every handshake on
/// the context, so the first handshakes on several threads at once would
/// race to store them (ThreadSanitizer sees one thread writing a key
/// identifier while another compares it). Working them out here, once,
/// before the context is shared, leaves handshakes only reading them.
/// Certificates OpenSSL loads later from a hashed directory are not covered.
void settle_trusted_certificates(ssl::context& context) {
  X509_STORE* store = SSL_CTX_get_cert_store(context.native_handle());
  if (store == nullptr) return;
  STACK_OF(X509_OBJECT)* objects = X509_STORE_get0_objects(store);
  for (int i = 0; i < sk_X509_OBJECT_num(objects); ++i)
    if (X509* certificate = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objects, i)))
      X509_check_purpose(certificate, -1, 0);
}

// The client certificate and key into `context`, or why not.
std::optional<std::string> use_client_certificate(ssl::context& context, const tls_files& files) {
  if (files.cert_file.empty()) {
    if (files.key_file.empty()) return std::nullopt;
    return "a client key ('" + files.key_file + "') needs its certificate";
  }
  const std::string& key_file = files.key_file.empty() ? files.cert_file : files.key_file;
  if (auto why = unreadable("client certificate", files.cert_file)) return why;
  if (auto why = unreadable("client key", key_file)) return why;
  error_code ec;
  context.use_certificate_chain_file(files.cert_file, ec);
  if (ec) return "the client certificate '" + files.cert_file + "' holds no usable PEM certificate (" + ec.message() + ")";
  // Asked for only when the key is encrypted; an empty password then fails.
  context.set_password_callback(
      [password = files.key_password](std::size_t, ssl::context::password_purpose) { return password; }, ec);
  context.use_private_key_file(key_file, ssl::context::pem, ec);
  const bool mismatch = ec && ec.category() == asio::error::get_ssl_category() &&
                        ERR_GET_LIB(static_cast<unsigned long>(ec.value())) == ERR_LIB_X509 &&
                        ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH;
  if (mismatch || (!ec && SSL_CTX_check_private_key(context.native_handle()) != 1)) {
    ERR_clear_error();
    return "the client key '" + key_file + "' does not belong to the certificate '" + files.cert_file + "'";
  }
  if (ec)
    return "the client key '" + key_file + "' holds no usable PEM private key, or its password is missing or wrong (" +
           ec.message() + ")";
  return std::nullopt;
}

} // namespace

std::optional<std::string> ca_file_problem(const std::string& path) {
  if (auto why = unreadable("CA file", path)) return why;
  ssl::context context(ssl::context::tls_client);
  error_code ec;
  context.load_verify_file(path, ec);
  if (ec)
    return "the CA file '" + path + "' holds no usable PEM certificate: no PEM certificate could be loaded from it (" +
           ec.message() + ")";
  return std::nullopt;
}

std::optional<std::string> tls_files_problem(const tls_files& files) {
  if (!files.ca_file.empty())
    if (auto why = ca_file_problem(files.ca_file)) return why;
  ssl::context context(ssl::context::tls_client);
  return use_client_certificate(context, files);
}

ssl::context make_client_context(const tls_files& files, bool verify_peer) {
  if (!files.ca_file.empty())
    if (auto why = ca_file_problem(files.ca_file)) throw std::invalid_argument(*why);
  ssl::context context(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(context.native_handle(), TLS1_2_VERSION);
  context.set_default_verify_paths();
  if (!files.ca_file.empty()) context.load_verify_file(files.ca_file);
  if (auto why = use_client_certificate(context, files)) throw std::invalid_argument(*why);
  context.set_verify_mode(verify_peer ? ssl::verify_peer : ssl::verify_none);
  settle_trusted_certificates(context);
  return context;
}

error_code expect_peer(ssl::stream<asio::ip::tcp::socket>& stream, const std::string& host) {
  error_code ec;
  asio::ip::make_address(host, ec);
  const bool address = !ec;
  SSL* native = stream.native_handle();
  // OpenSSL itself checks the name (or address), in the chain's
  // verification: a mismatch has its own verify result ("hostname
  // mismatch"), which a failed handshake can then be told by.
  const bool named = address ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(native), host.c_str()) == 1
                             : SSL_set1_host(native, host.c_str()) == 1 &&
                                   SSL_set_tlsext_host_name(native, host.c_str()) == 1;
  if (!named) return error_code(static_cast<int>(::ERR_get_error()), asio::error::get_ssl_category());
  return {};
}

} // namespace coretry::net
