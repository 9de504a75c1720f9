// Client certificates against the fault server requiring them: a client
// with the right certificate passes, one without fails permanently after one
// attempt, and unusable files are refused before anything is sent.

#include <coretry/http/client.hpp>
#include <coretry/http/tls.hpp>
#include <faults/fault_server.hpp>

#include <boost/asio/system_executor.hpp>

#include <doctest/doctest.h>

#include "blocking_client.hpp"
#include "policies.hpp"
#include "server_thread.hpp"

#include <cstdio>
#include <fstream>
#include <string>

#include <unistd.h>

namespace beast_http = boost::beast::http;
using coretry::stop_reason;
using coretry::test::loopback_policy;
using coretry::test::server_thread;

namespace {

struct pem_file {
  explicit pem_file(const std::string& content) {
    char name[] = "/tmp/coretry-cert-XXXXXX";
    const int fd = ::mkstemp(name);
    REQUIRE(fd >= 0);
    ::close(fd);
    std::ofstream(name) << content;
    path = name;
  }
  ~pem_file() { std::remove(path.c_str()); }
  std::string path;
};

/// A test PKI with a client certificate, its key encrypted with `password`
/// (none when empty), and an HTTPS fault server requiring certificates from
/// its CA.
struct requiring_server {
  static coretry::faults::test_pki make_pki(const std::string& password) {
    coretry::faults::pki_options o;
    o.client_certificate = true;
    o.client_key_password = password;
    return coretry::faults::generate_test_pki(o);
  }
  static coretry::faults::fault_server_options tls(const coretry::faults::test_pki& pki) {
    coretry::faults::fault_server_options o;
    o.tls = true;
    o.pki = pki;
    o.client_ca_pem = pki.ca_pem;
    return o;
  }
  explicit requiring_server(const std::string& password = {}) : pki(make_pki(password)) {}

  coretry::faults::test_pki pki;
  mutable server_thread server{tls(pki)};
  pem_file ca{pki.ca_pem};
  pem_file certificate{pki.client_cert_pem};
  pem_file key{pki.client_key_pem};

  std::string url() const { return "https://localhost:" + std::to_string(server->port()) + "/status/200"; }
  coretry::http::client_options options() const {
    coretry::http::client_options o;
    o.ca_file = ca.path;
    return o;
  }
  coretry::http::result get(const coretry::http::client_options& o) const {
    coretry_tests::blocking_client c(o);
    coretry::http::request_options request;
    request.policy = loopback_policy();
    return c.send(beast_http::verb::get, url(), request);
  }
};

} // namespace

TEST_CASE("a server requiring client certificates: passed with one, permanent after one attempt without") {
  requiring_server s;
  SUBCASE("with the certificate and its key") {
    auto o = s.options();
    o.certificate_file = s.certificate.path;
    o.private_key_file = s.key.path;
    const auto r = s.get(o);
    CHECK(r.reason == stop_reason::succeeded);
    CHECK(r.attempts == 1);
    CHECK(s.server->log().size() == 1);
  }
  SUBCASE("with the certificate and its key in one file") {
    pem_file both(s.pki.client_cert_pem + s.pki.client_key_pem);
    auto o = s.options();
    o.certificate_file = both.path;
    CHECK(s.get(o).succeeded());
  }
  SUBCASE("without one") {
    const auto r = s.get(s.options());
    CHECK(r.reason == stop_reason::rejected);
    CHECK(r.attempts == 1);
    CHECK(r.records[0].classified.category == "tls_client_certificate");
    CHECK(s.server->log().empty());
  }
  SUBCASE("with a certificate from another CA") {
    requiring_server other;
    auto o = s.options();
    o.certificate_file = other.certificate.path;
    o.private_key_file = other.key.path;
    const auto r = s.get(o);
    CHECK(r.reason == stop_reason::rejected);
    CHECK(r.attempts == 1);
    CHECK(r.records[0].classified.category == "tls_client_certificate");
  }
}

TEST_CASE("an encrypted client key: its password opens it, a wrong one is refused when the client is made") {
  requiring_server s("hunter2x");
  auto o = s.options();
  o.certificate_file = s.certificate.path;
  o.private_key_file = s.key.path;
  o.private_key_password = "hunter2x";
  CHECK(s.get(o).succeeded());
  o.private_key_password = "hunter3y";
  const auto problem = coretry::http::client_certificate_problem(o.certificate_file, o.private_key_file, "hunter3y");
  REQUIRE(problem);
  CHECK(problem->find(s.key.path) != std::string::npos);
  CHECK(problem->find("hunter3y") == std::string::npos); // never the password
  CHECK_THROWS_AS(coretry::http::client(boost::asio::system_executor(), o), std::invalid_argument);
}

TEST_CASE("unusable client certificate files are refused before anything is sent, naming the file") {
  requiring_server s;
  using coretry::http::client_certificate_problem;
  const auto missing = client_certificate_problem("/nonexistent/client.pem", "", "");
  REQUIRE(missing);
  CHECK(missing->find("cannot read the client certificate file '/nonexistent/client.pem'") != std::string::npos);
  const auto missing_key = client_certificate_problem(s.certificate.path, "/nonexistent/key.pem", "");
  REQUIRE(missing_key);
  CHECK(missing_key->find("/nonexistent/key.pem") != std::string::npos);
  pem_file garbage("not a certificate");
  CHECK(client_certificate_problem(garbage.path, s.key.path, ""));
  requiring_server other;
  const auto mismatch = client_certificate_problem(s.certificate.path, other.key.path, "");
  REQUIRE(mismatch);
  CHECK(mismatch->find("does not belong") != std::string::npos);
  CHECK_FALSE(client_certificate_problem(s.certificate.path, s.key.path, ""));
  coretry::http::client_options o;
  o.certificate_file = "/nonexistent/client.pem";
  CHECK_THROWS_AS(coretry::http::client(boost::asio::system_executor(), o), std::invalid_argument);
  CHECK(s.server->log().empty());
}
