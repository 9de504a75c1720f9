#include "faults/test_pki.hpp"
#include "test_support.hpp"

#include <boost/asio/ssl/error.hpp>

#include <doctest/doctest.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

using namespace fault_tests;
using coretry::faults::fault_server_options;
using coretry::faults::generate_test_pki;
using coretry::faults::pki_options;

namespace {

bool is_verification_failure(const error_code& error) {
  return error.category() == asio::error::get_ssl_category() &&
         ERR_GET_REASON(static_cast<unsigned long>(error.value())) == SSL_R_CERTIFICATE_VERIFY_FAILED;
}

fault_server_options tls_server(std::optional<coretry::faults::test_pki> pki = std::nullopt) {
  fault_server_options options;
  options.tls = true;
  options.pki = std::move(pki);
  return options;
}

// Connects to `server` trusting only `ca_pem`; returns the handshake's error
// and OpenSSL's verdict on the certificate.
std::pair<error_code, long> handshake(server_thread& server, const std::string& ca_pem,
                                      std::string host = "localhost") {
  test_client client{server->port(), tls_client_options{ca_pem, std::move(host)}};
  const error_code error = client.connect();
  return {error, client.verify_result()};
}

// Connects to `server` trusting its CA: checks that the handshake failed
// certificate verification with OpenSSL's verdict `expected`.
void check_verification_fails(server_thread& server, long expected) {
  const auto [error, verdict] = handshake(server, server->ca_certificate_pem());
  CAPTURE(error.message());
  CHECK(is_verification_failure(error));
  CHECK(verdict == expected);
}

} // namespace

TEST_SUITE("fault server TLS") {

TEST_CASE("the generated PKI is PEM: a CA, a certificate and a PKCS#8 key") {
  const auto pki = generate_test_pki();
  CHECK(pki.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
  CHECK(pki.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
  CHECK(pki.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
  CHECK(pki.ca_pem != pki.cert_pem);
  CHECK(generate_test_pki().ca_pem != pki.ca_pem); // fresh every time
  pki_options bad_address;
  bad_address.ip_addresses = {"not-an-ip"};
  CHECK_THROWS_AS(generate_test_pki(bad_address), std::invalid_argument);
}

TEST_CASE("a client trusting the generated CA verifies localhost and 127.0.0.1") {
  server_thread server{tls_server()};
  CHECK(server->base_url().starts_with("https://127.0.0.1:"));
  REQUIRE_FALSE(server->ca_certificate_pem().empty());

  test_client client{server->port(), tls_client_options{server->ca_certificate_pem(), "localhost"}};
  const reply result = client.get("/seq/t?steps=503,200");
  REQUIRE_FALSE(result.error);
  CHECK(client.verify_result() == X509_V_OK);
  CHECK(result.response.result_int() == 503);
  CHECK(client.get("/seq/t?steps=503,200").response.result_int() == 200); // kept alive over TLS

  // OpenSSL 3 matches an IP literal against the certificate's IP entries.
  const auto [error, verdict] = handshake(server, server->ca_certificate_pem(), "127.0.0.1");
  CHECK_FALSE(error);
  CHECK(verdict == X509_V_OK);
}

TEST_CASE("an expired certificate fails verification") {
  pki_options expired;
  expired.not_before = -std::chrono::hours{48};
  expired.not_after = -std::chrono::hours{24};
  server_thread server{tls_server(generate_test_pki(expired))};
  check_verification_fails(server, X509_V_ERR_CERT_HAS_EXPIRED);
}

TEST_CASE("a self-signed certificate fails verification against the CA") {
  pki_options self_signed;
  self_signed.signed_by_ca = false;
  server_thread server{tls_server(generate_test_pki(self_signed))};
  check_verification_fails(server, X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT);
}

TEST_CASE("a certificate for another host name fails verification") {
  pki_options other_host;
  other_host.dns_names = {"wrong.example"};
  other_host.ip_addresses = {};
  other_host.common_name = "wrong.example";
  server_thread server{tls_server(generate_test_pki(other_host))};
  check_verification_fails(server, X509_V_ERR_HOSTNAME_MISMATCH);

  // The same server, verified with the name it does carry, is fine.
  const auto [good_error, good_verdict] = handshake(server, server->ca_certificate_pem(), "wrong.example");
  CHECK_FALSE(good_error);
  CHECK(good_verdict == X509_V_OK);
}

TEST_CASE("a failed handshake leaves no connection behind") {
  pki_options self_signed;
  self_signed.signed_by_ca = false;
  server_thread server{tls_server(generate_test_pki(self_signed))};
  CHECK(handshake(server, server->ca_certificate_pem()).first);
  CHECK(eventually([&] { return server->open_connections() == 0; }, 3s));
  REQUIRE(server.stop_and_wait());
  CHECK(server->open_connections() == 0);
}

} // TEST_SUITE
