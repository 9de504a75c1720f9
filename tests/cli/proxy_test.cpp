// `coretry fetch` through proxies (tinyproxy, started here, and a proxy of
// the test's own) and with client certificates (`coretry faults
// --tls-client-ca`), run as a user runs them.

#include "process.hpp"

#include "../http/hostile_server.hpp"

#include <faults/test_pki.hpp>
#include <tinyproxy.hpp>
#include <skip.hpp>

#include <boost/json.hpp>

#include <doctest/doctest.h>

#include <fstream>

using namespace cli_tests;

namespace {

std::string text(const boost::json::value& value) { return std::string{value.as_string()}; }

coretry::faults::fault_server_options tls() {
  coretry::faults::fault_server_options o;
  o.tls = true;
  return o;
}

void write(const std::string& path, const std::string& content) { std::ofstream(path) << content; }

/// `coretry fetch ARGS` with the environment variables `env` (NAME=VALUE).
run_result fetch_with_environment(std::vector<std::string> env, const std::vector<std::string>& args) {
  env.push_back(program);
  env.push_back("fetch");
  env.insert(env.end(), args.begin(), args.end());
  return coretry::test::run("/usr/bin/env", std::move(env));
}

} // namespace

TEST_CASE("cli: proxy: -x and HTTPS_PROXY reach an https:// origin through tinyproxy, with retries") {
  if (coretry::test::tinyproxy_program().empty()) return coretry::test::skip_test("tinyproxy is not installed");
  coretry::test::tinyproxy proxy;
  server_thread server(tls());
  temporary_directory directory;
  const std::string ca = directory.file("ca.pem");
  write(ca, server->ca_certificate_pem());
  const std::string origin = "https://localhost:" + std::to_string(server->port());
  const std::string with_credentials = "http://user:pa55word@127.0.0.1:" + std::to_string(proxy.port());

  auto r = run({"fetch", "--json", "-x", with_credentials, "--cacert", ca, origin + "/seq/x?steps=503,200;body=ok"});
  INFO("stderr: " << r.err);
  CHECK(r.status == 0);
  CHECK(r.json().at("attempts").as_int64() == 2);
  CHECK(text(r.json().at("proxy")) == "http://REDACTED@127.0.0.1:" + std::to_string(proxy.port()));
  CHECK(r.out.find("pa55word") == std::string::npos);

  r = fetch_with_environment({"HTTPS_PROXY=" + proxy.url(), "NO_PROXY=other.example"},
                             {"-v", "--cacert", ca, origin + "/status/200?body=via-env"});
  CHECK(r.status == 0);
  CHECK(r.out == "via-env");
  CHECK(r.err.find("through the proxy " + proxy.url()) != std::string::npos);
  CHECK(proxy.log().find("CONNECT") != std::string::npos);
  CHECK(server->log().size() == 3);

  // NO_PROXY, and -x '' over the environment, go directly.
  const std::string unused = "http://127.0.0.1:1";
  r = fetch_with_environment({"HTTPS_PROXY=" + unused, "NO_PROXY=localhost"}, {"--cacert", ca, origin + "/status/200"});
  CHECK(r.status == 0);
  r = fetch_with_environment({"HTTPS_PROXY=" + unused}, {"-x", "", "--cacert", ca, origin + "/status/200"});
  CHECK(r.status == 0);
  // HTTP_PROXY in upper case is not read for http:// (curl's rule).
  server_thread plain;
  r = fetch_with_environment({"HTTP_PROXY=" + unused}, {plain.url("/status/200")});
  CHECK(r.status == 0);
  // http_proxy in lower case is: nothing listens there.
  r = fetch_with_environment({"http_proxy=" + unused}, {"--max-attempts", "1", plain.url("/status/200")});
  CHECK(r.status == 11);
}

TEST_CASE("cli: proxy: a 503 to CONNECT is retried for a POST without an idempotency key, and a 407 names the proxy") {
  server_thread server(tls());
  temporary_directory directory;
  const std::string ca = directory.file("ca.pem");
  write(ca, server->ca_certificate_pem());
  const std::string origin = "https://localhost:" + std::to_string(server->port());
  const unsigned short origin_port = server->port();
  using coretry_tests::hostile_server;
  hostile_server proxy({[](hostile_server::peer& p) {
                          if (p.read_request()) p.send("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
                        },
                        [origin_port](hostile_server::peer& p) {
                          if (p.read_request() && p.send("HTTP/1.1 200 Connection established\r\n\r\n"))
                            p.tunnel_to(origin_port);
                        },
                        [](hostile_server::peer& p) {
                          if (p.read_request()) p.send("HTTP/1.1 407 Proxy Authentication Required\r\n\r\n");
                        }});
  const std::string proxy_url = "http://me:s3cret@127.0.0.1:" + std::to_string(proxy.port());
  auto r = run({"fetch", "--json", "-x", proxy_url, "--cacert", ca, "-d", "order=1", origin + "/status/200"});
  INFO("stderr: " << r.err);
  CHECK(r.status == 0);
  CHECK(r.json().at("attempts").as_int64() == 2);
  CHECK(server->log().size() == 1);

  r = run({"fetch", "-x", proxy_url, "--cacert", ca, origin + "/status/200"});
  CHECK(r.status == 10);
  REQUIRE(r.err_lines().size() == 1);
  CHECK(r.err_lines()[0].find("proxy_407") != std::string::npos);
  CHECK(r.err_lines()[0].find("the proxy http://REDACTED@127.0.0.1:" + std::to_string(proxy.port())) !=
        std::string::npos);
  CHECK(r.err.find("s3cret") == std::string::npos);
}

TEST_CASE("cli: --cert/--key pass coretry faults --tls-client-ca, and without them one attempt is permanent") {
  coretry::faults::pki_options options;
  options.client_certificate = true;
  options.client_key_password = "hunter2x";
  const auto pki = coretry::faults::generate_test_pki(options);
  temporary_directory directory;
  const std::string client_ca = directory.file("client-ca.pem"), ca = directory.file("ca.pem"),
                    cert = directory.file("client.pem"), key = directory.file("client.key"),
                    password = directory.file("password");
  write(client_ca, pki.ca_pem);
  write(cert, pki.client_cert_pem);
  write(key, pki.client_key_pem);
  write(password, "hunter2x\n");
  listening_program server(program, {"faults", "--tls", "--tls-client-ca", client_ca, "--ca-out", ca}, 15s);
  const std::string url = "https://localhost:" + std::to_string(server.port()) + "/status/200?body=mutual";

  auto r = run({"fetch", "--cacert", ca, "--cert", cert, "--key", key, "--key-password-file", password, url});
  INFO("stderr: " << r.err);
  CHECK(r.status == 0);
  CHECK(r.out == "mutual");
  r = fetch_with_environment({"KEY_PASSWORD=hunter2x"},
                             {"--cacert", ca, "--cert", cert, "--key", key, "--key-password-env", "KEY_PASSWORD", url});
  CHECK(r.status == 0);

  r = run({"fetch", "--json", "--cacert", ca, url});
  CHECK(r.status == 10);
  CHECK(r.json().at("attempts").as_int64() == 1);
  CHECK(text(r.json().at("category")) == "tls_client_certificate");
  CHECK(server.stop(SIGTERM, 5s).status == 0);
}

TEST_CASE("cli: bad input: proxies and client certificates, refused before anything is sent") {
  server_thread server;
  const std::string url = server.url("/status/200");
  struct bad_case {
    std::vector<std::string> args;
    std::string named;
  };
  const std::vector<bad_case> cases{
      {{"-x", "https://user:pa55word@proxy.example:443"}, "https:// proxies"},
      {{"-x", "socks5://proxy.example:1080"}, "-x"},
      {{"-x", "http://proxy.example:3128/path"}, "without a path"},
      {{"--cert", "/nonexistent/client.pem"}, "/nonexistent/client.pem"},
      {{"--key", "/nonexistent/client.key"}, "--key needs --cert"},
      {{"--cert", "/etc/hostname", "--key-password-env", "CORETRY_NO_SUCH_VARIABLE"}, "CORETRY_NO_SUCH_VARIABLE"},
      {{"--cert", "/etc/hostname", "--key-password-file", "/nonexistent/password"}, "/nonexistent/password"},
      {{"--cert", "/etc/hostname"}, "no usable PEM certificate"},
  };
  for (const bad_case& c : cases) {
    std::vector<std::string> args{"fetch"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.push_back(url);
    const auto r = run(args, 10s);
    CAPTURE(c.named);
    INFO("stderr: " << r.err);
    CHECK(r.status == 2);
    REQUIRE(r.err_lines().size() == 1);
    CHECK(r.err_lines()[0].find(c.named) != std::string::npos);
    CHECK(r.err.find("pa55word") == std::string::npos);
  }
  auto r = fetch_with_environment({"HTTPS_PROXY=ftp://proxy.example"}, {"https://localhost:1/"});
  CHECK(r.status == 2);
  CHECK(r.err.find("HTTPS_PROXY") != std::string::npos);
  r = run({"faults", "--tls-client-ca", "/nonexistent/ca.pem"});
  CHECK(r.status == 2);
  CHECK(r.err.find("--tls") != std::string::npos);
  r = run({"faults", "--tls", "--tls-client-ca", "/nonexistent/ca.pem"});
  CHECK(r.status == 2);
  CHECK(r.err.find("/nonexistent/ca.pem") != std::string::npos);
  CHECK(server->log().empty());
}
