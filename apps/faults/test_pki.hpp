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
  /// Also a client certificate (clientAuth, signed by the CA), for servers
  /// that ask clients for one.
  bool client_certificate = false;
};

struct test_pki {
  std::string ca_pem;   ///< The CA certificate that clients should trust.
  std::string cert_pem; ///< The server certificate.
  std::string key_pem;  ///< The server's private key (PKCS#8, unencrypted).
  std::string client_cert_pem; ///< The client certificate (client_certificate), or empty.
  std::string client_key_pem;  ///< Its private key, or empty.
};

/// Generates EC P-256 keys and SHA-256-signed certificates: a CA (CA:TRUE,
/// valid from a day ago for a year), a server certificate for `options`,
/// and a client certificate when asked for.
/// Throws std::runtime_error naming the failed OpenSSL step.
test_pki generate_test_pki(const pki_options& options = {});

} // namespace coretry::faults

#endif
