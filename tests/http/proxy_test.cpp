// The HTTP client through proxies: tinyproxy (a real one, started here on
// loopback), and proxies of the tests' own (hostile_server) that refuse,
// stall or misbehave. What the origin and the proxy saw is asserted.

#include <coretry/http/client.hpp>
#include <coretry/http/proxy.hpp>
#include <faults/fault_server.hpp>

#include <doctest/doctest.h>

#include "blocking_client.hpp"
#include "hostile_server.hpp"
#include "policies.hpp"
#include "server_thread.hpp"
#include "skip.hpp"
#include "tinyproxy.hpp"

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include <unistd.h>

namespace beast_http = boost::beast::http;
using namespace std::chrono_literals;
using coretry::stop_reason;
using coretry::test::loopback_policy;
using coretry::test::server_thread;
using coretry_tests::hostile_server;

namespace {

/// A file holding `content`, removed with this object.
struct temporary_file {
  explicit temporary_file(const std::string& content) {
    char name[] = "/tmp/coretry-proxy-XXXXXX";
    const int fd = ::mkstemp(name);
    REQUIRE(fd >= 0);
    ::close(fd);
    std::ofstream(name) << content;
    path = name;
  }
  ~temporary_file() { std::remove(path.c_str()); }
  std::string path;
};

/// An HTTPS fault server, its CA in a file, and a client through `proxy`.
struct tls_origin {
  static coretry::faults::fault_server_options tls() {
    coretry::faults::fault_server_options o;
    o.tls = true;
    return o;
  }
  mutable server_thread server{tls()};
  temporary_file ca{server->ca_certificate_pem()};

  coretry::http::client_options through(const std::string& proxy) const {
    coretry::http::client_options o;
    o.ca_file = ca.path;
    o.proxy = proxy;
    return o;
  }
  /// `target` by the name the certificate holds, as a user would write it.
  std::string url(const std::string& target) const {
    return "https://localhost:" + std::to_string(server->port()) + target;
  }
};

coretry::http::request_options with(coretry::policy p) {
  coretry::http::request_options o;
  o.policy = p;
  return o;
}

/// A CONNECT answered with `answer`, then the connection closed.
hostile_server::script tunnel_answers(std::string answer) {
  return [answer](hostile_server::peer& p) {
    if (p.read_request()) p.send(answer);
  };
}

/// A CONNECT answered 200, then the tunnel to `port`.
hostile_server::script tunnels_to(unsigned short port) {
  return [port](hostile_server::peer& p) {
    if (p.read_request() && p.send("HTTP/1.1 200 Connection established\r\n\r\n")) p.tunnel_to(port);
  };
}

} // namespace

TEST_CASE("an https:// origin through tinyproxy: a CONNECT tunnel, TLS verified against the origin, retries as without") {
  if (coretry::test::tinyproxy_program().empty()) return coretry::test::skip_test("tinyproxy is not installed");
  coretry::test::tinyproxy proxy;
  tls_origin origin;
  coretry_tests::blocking_client c(origin.through(proxy.url()));
  const auto r = c.send(beast_http::verb::get, origin.url("/seq/t?steps=503,200"), with(loopback_policy()));
  CHECK(r.reason == stop_reason::succeeded);
  CHECK(r.attempts == 2);
  CHECK(r.value->proxy == proxy.url());
  CHECK(r.value->res->result_int() == 200);
  CHECK(origin.server->log().size() == 2);
  CHECK(proxy.log().find("CONNECT") != std::string::npos); // the proxy, not a direct connection
}

TEST_CASE("an http:// origin through tinyproxy: the request in absolute form, the answer forwarded") {
  if (coretry::test::tinyproxy_program().empty()) return coretry::test::skip_test("tinyproxy is not installed");
  coretry::test::tinyproxy proxy;
  server_thread server;
  coretry::http::client_options options;
  options.proxy = proxy.url();
  coretry_tests::blocking_client c(options);
  const auto r = c.send(beast_http::verb::get, server.url("/status/200"), with(loopback_policy()));
  REQUIRE(r.succeeded());
  // tinyproxy marks what it forwards.
  CHECK(r.value->res->find("Via") != r.value->res->end());
  REQUIRE(server->log().size() == 1);
  CHECK(server->log()[0].target == "/status/200");
}

TEST_CASE("a proxy's 503 to CONNECT is retried for a POST without an idempotency key: it never reached the origin") {
  tls_origin origin;
  hostile_server proxy({tunnel_answers("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"),
                        tunnels_to(origin.server->port())});
  coretry_tests::blocking_client c(origin.through("http://user:s3cret@127.0.0.1:" + std::to_string(proxy.port())));
  const auto r = c.send(beast_http::verb::post, origin.url("/status/200"), with(loopback_policy()), "payload");
  CHECK(r.reason == stop_reason::succeeded);
  REQUIRE(r.attempts == 2);
  CHECK(r.records[0].classified.category == "proxy_503");
  CHECK(r.records[0].classified.delivered == coretry::delivery::never_sent);
  CHECK(r.value->proxy == "http://REDACTED@127.0.0.1:" + std::to_string(proxy.port()));
  const auto received = origin.server->log();
  REQUIRE(received.size() == 1); // once, through the second tunnel
  CHECK(received[0].method == "POST");
  const auto heads = proxy.requests();
  REQUIRE(heads.size() == 2);
  const std::string authority = "localhost:" + std::to_string(origin.server->port());
  CHECK(heads[0].starts_with("CONNECT " + authority + " HTTP/1.1\r\n"));
  CHECK(heads[0].find("Host: " + authority + "\r\n") != std::string::npos);
  // base64("user:s3cret"), to the proxy alone.
  CHECK(heads[0].find("Proxy-Authorization: Basic dXNlcjpzM2NyZXQ=\r\n") != std::string::npos);
  for (const auto& field : received[0].fields) CHECK(field.first != "Proxy-Authorization");
}

TEST_CASE("a proxy's 407 is permanent after one attempt and names the proxy") {
  tls_origin origin;
  hostile_server proxy(tunnel_answers("HTTP/1.1 407 Proxy Authentication Required\r\n"
                               "Proxy-Authenticate: Basic realm=\"p\"\r\nContent-Length: 0\r\n\r\n"));
  coretry_tests::blocking_client c(origin.through("127.0.0.1:" + std::to_string(proxy.port())));
  const auto r = c.send(beast_http::verb::get, origin.url("/status/200"), with(loopback_policy()));
  CHECK(r.reason == stop_reason::rejected);
  CHECK(r.attempts == 1);
  CHECK(r.records[0].classified.category == "proxy_407");
  CHECK(r.value->proxy_status == 407);
  CHECK(r.value->error == coretry::http::proxy_error::refused);
  CHECK(r.value->proxy == "http://127.0.0.1:" + std::to_string(proxy.port()));
  CHECK(origin.server->log().empty());
}

TEST_CASE("a proxy's 503 to an absolute-form POST is the origin's answer: not repeated") {
  hostile_server proxy([](hostile_server::peer& p) {
    if (p.read_request()) p.send("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
  });
  coretry::http::client_options options;
  options.proxy = proxy.url();
  coretry_tests::blocking_client c(options);
  const auto r = c.send(beast_http::verb::post, "http://origin.test:8080/orders?x=1", with(loopback_policy()), "p");
  CHECK(r.attempts == 1);
  CHECK(r.records[0].classified.category == "http_503");
  REQUIRE(proxy.requests().size() == 1);
  CHECK(proxy.requests()[0].starts_with("POST http://origin.test:8080/orders?x=1 HTTP/1.1\r\n"));
  CHECK(proxy.requests()[0].find("Host: origin.test:8080\r\n") != std::string::npos);
}

TEST_CASE("a hostile proxy's answer to CONNECT is read within bounds") {
  tls_origin origin;
  SUBCASE("a header over header_limit: permanent, one attempt") {
    hostile_server proxy(tunnel_answers("HTTP/1.1 200 OK\r\nX-Padding: " + std::string(64 * 1024, 'x') + "\r\n\r\n"));
    auto options = origin.through(proxy.url());
    options.header_limit = 4096;
    coretry_tests::blocking_client c(options);
    const auto r = c.send(beast_http::verb::get, origin.url("/status/200"), with(loopback_policy()));
    CHECK(r.attempts == 1);
    CHECK(r.records[0].classified.category == "proxy_bad_answer");
    CHECK(r.value->error == coretry::http::proxy_error::bad_answer);
  }
  SUBCASE("bytes after its 200, before the TLS handshake: permanent") {
    hostile_server proxy(tunnel_answers("HTTP/1.1 200 OK\r\n\r\nHTTP/1.1 200 OK\r\n"));
    coretry_tests::blocking_client c(origin.through(proxy.url()));
    const auto r = c.send(beast_http::verb::get, origin.url("/status/200"), with(loopback_policy()));
    CHECK(r.attempts == 1);
    CHECK(r.records[0].classified.category == "proxy_bad_answer");
  }
  SUBCASE("never answering: each attempt ends at its deadline, and the request is never sent") {
    hostile_server proxy([](hostile_server::peer& p) {
      if (p.read_request()) p.wait_for_close();
    });
    coretry_tests::blocking_client c(origin.through(proxy.url()));
    auto policy = loopback_policy(2s, 150ms);
    policy.max_attempts = 2;
    const auto started = std::chrono::steady_clock::now();
    const auto r = c.send(beast_http::verb::post, origin.url("/status/200"), with(policy), "p");
    CHECK(std::chrono::steady_clock::now() - started < 1500ms);
    CHECK(r.attempts == 2); // a POST: repeated only because nothing left for the origin
    CHECK(r.records[0].classified.category == "timeout");
    CHECK(r.records[0].classified.delivered == coretry::delivery::never_sent);
    CHECK(origin.server->log().empty());
  }
}

TEST_CASE("no_proxy hosts are reached directly") {
  hostile_server proxy(tunnel_answers("HTTP/1.1 502 Bad Gateway\r\n\r\n"));
  server_thread server;
  coretry::http::client_options options;
  options.proxy = proxy.url();
  options.no_proxy = "example.com, 127.0.0.0/8";
  coretry_tests::blocking_client c(options);
  const auto r = c.send(beast_http::verb::get, server.url("/status/200"), with(loopback_policy()));
  CHECK(r.succeeded());
  CHECK(r.value->proxy.empty());
  CHECK(proxy.connections() == 0);
}

TEST_CASE("proxy URLs: http:// and bare host:port taken, https:// and others refused naming the problem") {
  using coretry::http::parse_proxy_url;
  const auto plain = parse_proxy_url("http://Proxy.Example:3128");
  CHECK(plain.host == "proxy.example");
  CHECK(plain.port == 3128);
  CHECK(plain.authorization.empty());
  const auto bare = parse_proxy_url("10.0.0.1");
  CHECK(bare.port == 1080); // curl's default
  const auto credentials = parse_proxy_url("http://a%40b:p%3Ass@[::1]:8080/");
  CHECK(credentials.host == "::1");
  CHECK(credentials.authorization == "Basic YUBiOnA6c3M="); // base64("a@b:p:ss")
  CHECK(credentials.shown.find("p%3Ass") == std::string::npos);
  const auto https = coretry::http::proxy_url_problem("https://user:pw@proxy:443");
  REQUIRE(https);
  CHECK(https->find("https:// proxies") != std::string::npos);
  CHECK(https->find("pw") == std::string::npos);
  CHECK(coretry::http::proxy_url_problem("socks5://proxy:1080"));
  CHECK(coretry::http::proxy_url_problem("http://proxy:3128/path"));
  CHECK(coretry::http::proxy_url_problem("http://proxy:99999"));
  CHECK_THROWS_AS(coretry::http::client(boost::asio::system_executor(), [] {
                    coretry::http::client_options o;
                    o.proxy = "https://proxy:443";
                    return o;
                  }()),
                  std::invalid_argument);
}

TEST_CASE("NO_PROXY lists as curl reads them") {
  using coretry::http::bypasses_proxy;
  CHECK(bypasses_proxy("*", "anything.example"));
  CHECK(bypasses_proxy("example.com", "example.com"));
  CHECK(bypasses_proxy("example.com", "api.example.com"));
  CHECK(bypasses_proxy(".example.com", "api.example.com"));
  CHECK(bypasses_proxy(" other.org , EXAMPLE.com ", "api.example.com"));
  CHECK_FALSE(bypasses_proxy("example.com", "badexample.com"));
  CHECK_FALSE(bypasses_proxy("api.example.com", "example.com"));
  CHECK(bypasses_proxy("example.com.", "example.com."));
  CHECK(bypasses_proxy("10.0.0.0/8", "10.1.2.3"));
  CHECK_FALSE(bypasses_proxy("10.0.0.0/8", "11.1.2.3"));
  CHECK(bypasses_proxy("127.0.0.1", "127.0.0.1"));
  CHECK_FALSE(bypasses_proxy("127.0.0.1", "127.0.0.2"));
  CHECK(bypasses_proxy("[::1]", "::1"));
  CHECK(bypasses_proxy("fd00::/8", "fd12::1"));
  CHECK_FALSE(bypasses_proxy("", "example.com"));
  CHECK_FALSE(bypasses_proxy("*.example.com", "api.example.com")); // curl takes no wildcards but '*' alone
}

TEST_CASE("the environment's proxy by curl's rules") {
  std::map<std::string, std::string> env;
  const auto lookup = [&env](const char* name) -> const char* {
    const auto found = env.find(name);
    return found == env.end() ? nullptr : found->second.c_str();
  };
  using coretry::http::proxy_from_environment;
  env = {{"HTTPS_PROXY", "http://upper:1"}, {"HTTP_PROXY", "http://cgi:1"}, {"NO_PROXY", "a.example"}};
  CHECK(proxy_from_environment(true, lookup).proxy == "http://upper:1");
  CHECK(proxy_from_environment(true, lookup).proxy_variable == "HTTPS_PROXY");
  CHECK(proxy_from_environment(true, lookup).no_proxy == "a.example");
  CHECK(proxy_from_environment(false, lookup).proxy.empty()); // HTTP_PROXY is never read
  env["https_proxy"] = "http://lower:1";
  env["http_proxy"] = "http://plain:1";
  env["no_proxy"] = "b.example";
  CHECK(proxy_from_environment(true, lookup).proxy == "http://lower:1"); // lower case wins
  CHECK(proxy_from_environment(false, lookup).proxy == "http://plain:1");
  CHECK(proxy_from_environment(false, lookup).no_proxy == "b.example");
  env = {{"ALL_PROXY", "http://all:1"}};
  CHECK(proxy_from_environment(false, lookup).proxy == "http://all:1");
  env = {{"https_proxy", ""}, {"HTTPS_PROXY", "http://upper:1"}};
  CHECK(proxy_from_environment(true, lookup).proxy.empty()); // set and empty: none
}
