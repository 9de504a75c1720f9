// Bad input is refused with exit status 2 and one line naming the problem,
// before anything is sent: the fault server's log stays empty.

#include "process.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <initializer_list>
#include <tuple>
#include <utility>

using namespace cli_tests;

namespace {

struct bad_case {
  const char* what;
  std::vector<std::string> args; ///< "URL" is replaced by a working URL of the server
  const char* named;             ///< what the error line must mention
};

} // namespace

TEST_CASE("cli: bad input: exit 2, one line naming the problem, nothing sent") {
  server_thread server;
  temporary_directory directory;
  const std::string not_a_certificate = directory.file("ca.pem");
  std::ofstream(not_a_certificate) << "not a certificate\n";
  const std::string url = server.url("/status/200");
  const std::string port = std::to_string(server->port());
  const std::vector<bad_case> cases{
      {"URL without a scheme", {"127.0.0.1:" + port + "/status/200"}, "no scheme"},
      {"URL with another scheme", {"localhost:" + port + "/status/200"}, "http or https"},
      {"URL without a host", {"http:///status/200"}, "no host"},
      {"URL with a bad port", {"http://127.0.0.1:70000/status/200"}, "port"},
      {"no URL", {}, "URL"},
      {"header with CR LF", {"-H", "X-Note: one\r\nInjected: yes", "URL"}, "CR, LF"},
      {"header with LF", {"-H", "X-Note: one\nInjected: yes", "URL"}, "CR, LF"},
      {"header without a colon", {"-H", "X-Note one", "URL"}, "colon"},
      {"header with a bad name", {"-H", "X Note: one", "URL"}, "field name"},
      {"negative duration", {"--max-time", "-1", "URL"}, "negative"},
      {"NaN duration", {"--attempt-timeout", "nan", "URL"}, "not a number"},
      {"infinite duration", {"--backoff-cap", "inf", "URL"}, "not a number"},
      {"absurd duration", {"--max-time", "100000", "URL"}, "86400"},
      {"zero deadline", {"--max-time", "0", "URL"}, "more than 0"},
      {"duration with a unit", {"--connect-timeout", "5s", "URL"}, "--connect-timeout"},
      {"zero attempts", {"--max-attempts", "0", "URL"}, "--max-attempts"},
      {"too many attempts", {"--max-attempts", "1001", "URL"}, "--max-attempts"},
      {"too many retries", {"--retry", "1000", "URL"}, "--retry"},
      {"--retry with --max-attempts", {"--retry", "2", "--max-attempts", "3", "URL"}, "only one"},
      {"unknown jitter", {"--jitter", "sometimes", "URL"}, "--jitter"},
      {"backoff initial above its cap", {"--backoff-initial", "2", "--backoff-cap", "1", "URL"}, "--backoff-cap"},
      {"unreadable -d @file", {"-d", "@/nonexistent/order.json", "URL"}, "/nonexistent/order.json"},
      {"unreadable --cacert", {"--cacert", "/nonexistent/ca.pem", "URL"}, "--cacert"},
      {"--cacert without a certificate", {"--cacert", not_a_certificate, "URL"}, "no PEM certificate"},
      {"-o in a missing directory", {"-o", "/nonexistent/book.json", "URL"}, "-o"},
      {"-o naming a directory", {"-o", directory.path(), "URL"}, "is a directory"},
      {"zero --max-filesize", {"--max-filesize", "0", "URL"}, "--max-filesize"},
      {"--max-filesize with a unit it lacks", {"--max-filesize", "5T", "URL"}, "--max-filesize"},
      {"--max-filesize beyond 2^62", {"--max-filesize", "99999999999999999999", "URL"}, "--max-filesize"},
      {"--stdout-limit above 1G", {"--stdout-limit", "2G", "URL"}, "--stdout-limit"},
      {"--stdout-limit with -o", {"--stdout-limit", "1M", "-o", directory.file("x"), "URL"}, "--stdout-limit"},
      {"bad method", {"-X", "GET /other", "URL"}, "-X"},
      {"bad idempotency key", {"--idempotency-key", "two words", "URL"}, "--idempotency-key"},
      {"out-of-credits rule without '='", {"--out-of-credits-header", "x-api-remaining-credits", "URL"}, "NAME=VALUE"},
      {"invalid regex", {"--permanent-5xx-body", "website (", "URL"}, "regular expression"},
      {"--resolve without addresses", {"--resolve", "pricing:" + port, "URL"}, "--resolve: resolve entry"},
      {"--resolve with a name for an address", {"--resolve", "pricing:80:localhost", "URL"}, "not an IPv4 address"},
      {"--resolve with bare IPv6", {"--resolve", "pricing:80:::1", "URL"}, "in brackets"},
      {"--balance of no known mode", {"--balance", "round_robin", "URL"}, "--balance: 'round_robin' is not"},
      {"unknown option", {"--frobnicate", "URL"}, "--frobnicate"},
      {"option without its value", {"URL", "--max-time"}, "--max-time"},
  };
  for (const bad_case& c : cases) {
    CAPTURE(c.what);
    std::vector<std::string> args{"fetch"};
    for (const std::string& arg : c.args) args.push_back(arg == "URL" ? url : arg);
    const auto r = run(args, 10s);
    CHECK(r.status == 2);
    CHECK(r.out.empty());
    INFO("stderr: " << r.err);
    REQUIRE(r.err_lines().size() == 1);
    CHECK(r.err_lines()[0].find(c.named) != std::string::npos);
  }
  CHECK(server->log().empty());
}

TEST_CASE("cli: bad input: a refused header never shows its value") {
  server_thread server;
  for (const char* header : {"Authorization: Bearer s3cret\r\nX-Injected: yes", "Authorization Bearer s3cret",
                             "X-Api-Key: s3cret\n"}) {
    CAPTURE(header);
    const auto r = run({"fetch", "-H", header, server.url("/status/200")});
    CHECK(r.status == 2);
    CHECK(r.err.find("s3cret") == std::string::npos);
  }
  // Nor does a URL's password or API key.
  const auto r = run({"fetch", "ftp://user:pa55word@127.0.0.1/x?api_key=k3y"});
  CHECK(r.status == 2);
  CHECK(r.err.find("pa55word") == std::string::npos);
  CHECK(r.err.find("k3y") == std::string::npos);
  CHECK(server->log().empty());
}

TEST_CASE("cli: bad input: the other subcommands") {
  auto r = run({"faults", "--listen", "not-an-address"});
  CHECK(r.status == 2);
  REQUIRE(r.err_lines().size() == 1);
  CHECK(r.err_lines()[0].find("--listen") != std::string::npos);

  r = run({"faults", "--ca-out", "/tmp/ca.pem"});
  CHECK(r.status == 2);
  REQUIRE(r.err_lines().size() == 1);
  CHECK(r.err_lines()[0].find("--tls") != std::string::npos);

  for (const char* limit : {"-1", "lots", "1.5"}) {
    CAPTURE(limit);
    r = run({"faults", "--log-limit", limit});
    CHECK(r.status == 2);
    REQUIRE(r.err_lines().size() == 1);
    CHECK(r.err_lines()[0].find("--log-limit") != std::string::npos);
  }

  // Each refusal names its option and, where given, the problem.
  for (const auto& [option, value, named] : std::initializer_list<std::tuple<const char*, const char*, const char*>>{
           {"--header-timeout", "0", ""}, {"--header-timeout", "-1", ""}, {"--header-timeout", "soon", ""},
           {"--keep-alive-timeout", "0", ""}, {"--keep-alive-timeout", "1e3", ""},
           {"--keep-alive-timeout", "90000", ""},
           {"--send-timeout", "0", ""}, {"--send-timeout", "soon", ""}, {"--send-timeout", "90000", ""},
           {"--max-clients", "0", ""}, {"--max-clients", "100001", ""}, {"--max-clients", "many", ""},
           {"--workers", "0", "outside 1 to 10000"}, {"--workers", "10001", "outside 1 to 10000"},
           {"--workers", "eight", "not a whole number"}, {"--service-ms", "60001", "outside 0 to 60000"},
           {"--service-ms", "-5", ""}, {"--service-ms", "2.5", "not a whole number"},
           {"--queue-limit", "1000001", "outside 0 to 1000000"}, {"--queue-limit", "", "got nothing"}}) {
    CAPTURE(option);
    CAPTURE(value);
    r = run({"faults", option, value});
    CHECK(r.status == 2);
    REQUIRE(r.err_lines().size() == 1);
    CHECK(r.err_lines()[0].find(option) != std::string::npos);
    CHECK(r.err_lines()[0].find(named) != std::string::npos);
  }

  r = run({"nonsense"});
  CHECK(r.status == 2);
  CHECK(r.err_lines().size() == 1);

  r = run({});
  CHECK(r.status == 2);
  CHECK(r.err_lines().size() == 1);
}
