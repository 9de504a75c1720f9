#ifndef CORETRY_FAULTS_TEST_PKI_HPP
#define CORETRY_FAULTS_TEST_PKI_HPP

#include <chrono>
#include <string>
#include <vector>

// Throwaway certificates for TLS tests: a fresh certificate authority and a
// server certificate, made in memory at run time so that no key is ever
// checked in and every run trusts only its own CA.
namespace coretry::faults {

struct pki_options {
  /// Host names put in the server certificate's subjectAltName.
  std::vector<std::string> dns_names{"localhost"};
  /// IPv4/IPv6 addresses put in the server certificate's subjectAltName.
  std::vector<std::string> ip_addresses{"127.0.0.1"};
  /// The server certificate's subject CN (clients match subjectAltName, not this).
  std::string common_name = "localhost";
  /// The server certificate's validity window, relative to now. Both in the
  /// past makes an expired certificate; both in the future a not-yet-valid one.
  std::chrono::seconds not_before = -std::chrono::hours{1};
  std::chrono::seconds not_after = std::chrono::hours{24};
  /// False makes the server certificate self-signed: the returned CA is then
  /// unrelated to it, so a client trusting that CA rejects the server.
  bool signed_by_ca = true;
  /// Also make a client certificate signed by the CA (test_pki::client_cert_pem).
  bool client_certificate = false;
  /// Encrypt the client's private key (AES-256-CBC) with this password; empty: unencrypted.
  std::string client_key_password;
};

struct test_pki {
  std::string ca_pem;   ///< The CA certificate that clients should trust.
  std::string cert_pem; ///< The server certificate.
  std::string key_pem;  ///< The server's private key (PKCS#8, unencrypted).
  /// With pki_options::client_certificate: a certificate for TLS client
  /// authentication (CN "coretry test client") and its private key.
  std::string client_cert_pem;
  std::string client_key_pem;
};

/// Generates EC P-256 keys and SHA-256-signed certificates: a CA (CA:TRUE,
/// valid from a day ago for a year), a server certificate for `options`,
/// and a client certificate when asked for.
/// Throws std::runtime_error naming the failed OpenSSL step.
test_pki generate_test_pki(const pki_options& options = {});

} // namespace coretry::faults

#endif
