// `coretry fetch` run as a program against a fault server on loopback: the
// exit status and JSON of each stop reason, what the server received, and
// what is left on disk.

#include "process.hpp"
#include "raw_server.hpp"

#include <boost/json.hpp>

#include <doctest/doctest.h>

#include <csignal>
#include <fstream>

using namespace cli_tests;

namespace {

std::string text(const boost::json::value& value) { return std::string{value.as_string()}; }

/// Checks what every --json outcome must say.
void check_outcome(const run_result& r, int status, const std::string& stop_reason, std::int64_t attempts) {
  INFO("stdout: " << r.out);
  INFO("stderr: " << r.err);
  CHECK_FALSE(r.timed_out);
  CHECK(r.status == status);
  const auto json = r.json();
  CHECK(text(json.at("stop_reason")) == stop_reason);
  CHECK(json.at("attempts").as_int64() == attempts);
  CHECK(json.at("exit_status").as_int64() == status);
  CHECK(json.at("elapsed_ms").is_int64());
  REQUIRE(json.at("attempt_log").as_array().size() == static_cast<std::size_t>(attempts));
  // On failure, one line on stderr says why.
  if (status != 0) {
    REQUIRE(r.err_lines().size() == 1);
    CHECK(r.err_lines()[0].find(stop_reason) != std::string::npos);
  }
}

const boost::json::object& attempt(const boost::json::object& json, std::size_t index) {
  return json.at("attempt_log").as_array().at(index).as_object();
}

} // namespace

TEST_CASE("cli: succeeded: the body on stdout, exit 0") {
  server_thread server;
  const auto r = run({"fetch", server.url("/status/200?body=hello")});
  CHECK(r.status == 0);
  CHECK(r.out == "hello");
  CHECK(r.err.empty());
}

TEST_CASE("cli: succeeded: --json describes the outcome instead of the body") {
  server_thread server;
  const auto r = run({"fetch", "--json", server.url("/status/200?body=hello")});
  check_outcome(r, 0, "succeeded", 1);
  const auto json = r.json();
  CHECK(json.at("status").as_int64() == 200);
  CHECK(json.at("succeeded").as_bool());
  CHECK(text(json.at("body_start")) == "hello");
  CHECK(attempt(json, 0).at("status").as_int64() == 200);
  CHECK(text(attempt(json, 0).at("wait_source")) == "none");
  CHECK(attempt(json, 0).at("wait_before_ms").as_int64() == 0);
}

TEST_CASE("cli: rejected: a 404 is not retried, exit 10") {
  server_thread server;
  const auto r = run({"fetch", "--json", server.url("/status/404")});
  check_outcome(r, 10, "rejected", 1);
  CHECK(r.json().at("status").as_int64() == 404);
  CHECK(r.err_lines()[0].find("404") != std::string::npos);
  CHECK(server->log().size() == 1);
}

TEST_CASE("cli: attempts_exhausted: --retry 2 is three attempts, exit 11") {
  server_thread server;
  const auto r = run({"fetch", "--json", "--retry", "2", "--backoff-initial", "0.01", server.url("/status/502")});
  check_outcome(r, 11, "attempts_exhausted", 3);
  const auto json = r.json();
  CHECK(json.at("status").as_int64() == 502);
  CHECK(text(attempt(json, 1).at("wait_source")) == "local");
  CHECK(text(attempt(json, 2).at("category")) == "http_502");
  CHECK(server->log().size() == 3);
}

TEST_CASE("cli: deadline_exhausted: no time left for a useful attempt, exit 12") {
  server_thread server;
  // Attempts of 200 ms and waits of 50 ms: after the second attempt less than
  // the 100 ms minimum remains of 500 ms minus the 50 ms reserve.
  const auto r = run({"fetch", "--json", "--max-time", "0.5", "--attempt-timeout", "0.2", "--jitter", "none",
                      "--backoff-initial", "0.05", "--max-attempts", "10", server.url("/status/200?delay=2000")});
  check_outcome(r, 12, "deadline_exhausted", 2);
  const auto json = r.json();
  CHECK(json.at("status").is_null());
  CHECK(text(attempt(json, 0).at("category")) == "timeout");
  CHECK(json.at("elapsed_ms").as_int64() < 1000);
}

TEST_CASE("cli: server_delay_too_long: a Retry-After beyond --max-time stops at once, exit 13") {
  server_thread server;
  const auto r = run({"fetch", "--json", "--max-time", "2", server.url("/status/503?retry-after=5")});
  check_outcome(r, 13, "server_delay_too_long", 1);
  CHECK(r.json().at("status").as_int64() == 503);
  CHECK(text(attempt(r.json(), 0).at("retry_after")) == "5");
  CHECK(r.took < 1500ms);
}

TEST_CASE("cli: outcome_unknown: a POST that times out is not retried, exit 16") {
  server_thread server;
  const auto r = run({"fetch", "--json", "-d", "{\"order\":1}", "--attempt-timeout", "0.3",
                      server.url("/status/200?delay=2000")});
  check_outcome(r, 16, "outcome_unknown", 1);
  const auto json = r.json();
  CHECK(text(json.at("method")) == "POST");
  CHECK(text(attempt(json, 0).at("delivery")) == "unknown");
  const auto log = server->log();
  REQUIRE(log.size() == 1);
  CHECK(log[0].method == "POST");
}

TEST_CASE("cli: a POST with --idempotency-key auto is retried with the same key") {
  server_thread server;
  const auto r = run({"fetch", "--json", "-d", "{\"order\":1}", "--idempotency-key", "auto",
                      server.url("/seq/order?steps=503,200")});
  check_outcome(r, 0, "succeeded", 2);
  const auto log = server->log();
  REQUIRE(log.size() == 2);
  REQUIRE(log[0].idempotency_key);
  CHECK(log[0].idempotency_key->size() == 36);
  CHECK(log[0].idempotency_key == log[1].idempotency_key);
  CHECK(log[0].body_length == log[1].body_length);
  CHECK(text(r.json().at("idempotency_key")) == *log[0].idempotency_key);
}

TEST_CASE("cli: a POST with a given --idempotency-key sends it on every attempt") {
  server_thread server;
  const auto r = run({"fetch", "-X", "POST", "-d", "x", "--idempotency-key", "order-1042",
                      server.url("/seq/keyed?steps=502,200")});
  CHECK(r.status == 0);
  const auto log = server->log();
  REQUIRE(log.size() == 2);
  CHECK(log[0].idempotency_key == "order-1042");
  CHECK(log[1].idempotency_key == "order-1042");
}

TEST_CASE("cli: Retry-After in seconds is honoured as a minimum") {
  server_thread server;
  const auto r = run({"fetch", "--json", server.url("/seq/limited?steps=429;retry-after=1,200")});
  check_outcome(r, 0, "succeeded", 2);
  const auto json = r.json();
  CHECK(attempt(json, 0).at("status").as_int64() == 429);
  CHECK(text(attempt(json, 1).at("wait_source")) == "server");
  CHECK(attempt(json, 1).at("wait_before_ms").as_int64() >= 1000);
  CHECK(attempt(json, 1).at("wait_before_ms").as_int64() <= 1100); // the spread is at most 100 ms
}

TEST_CASE("cli: Retry-After as an HTTP date is honoured as a minimum") {
  server_thread server;
  const auto r = run({"fetch", "--json", server.url("/seq/dated?steps=503;retry-after-date=%2B2,200")});
  check_outcome(r, 0, "succeeded", 2);
  const auto json = r.json();
  CHECK(text(attempt(json, 1).at("wait_source")) == "server");
  // Retry-After is the server's Date plus 2 s, both from one reading of its
  // clock, and the client measures the date against that Date: exactly 2 s.
  CHECK(attempt(json, 0).at("server_delay_ms").as_int64() == 2000);
  // The planned wait is at least the server's delay (plus up to 100 ms of
  // spread), never less.
  CHECK(attempt(json, 1).at("wait_before_ms").as_int64() >= 2000);
  CHECK(attempt(json, 1).at("wait_before_ms").as_int64() <= 2100);
  // The measured gap: a timer fires late, never early; start and end are
  // each rounded to the nearest millisecond, so their difference can read
  // up to 1 ms short of the 2000 ms slept.
  const auto gap = attempt(json, 1).at("start_ms").as_int64() - attempt(json, 0).at("end_ms").as_int64();
  CHECK(gap >= 2000 - 1);
}

TEST_CASE("cli: a drip-fed body is cut at the attempt deadline, not the idle limit") {
  server_thread server;
  // One byte every 50 ms never trips the 1 s idle limit; the whole body would take 5 s.
  const auto r = run({"fetch", "--json", "--idle-timeout", "1", "--attempt-timeout", "0.3", "--max-attempts", "1",
                      server.url("/status/200?drip=100:50")});
  check_outcome(r, 11, "attempts_exhausted", 1);
  const auto json = r.json();
  CHECK(text(attempt(json, 0).at("category")) == "timeout");
  CHECK(text(attempt(json, 0).at("reached")) == "reading");
  CHECK(json.at("elapsed_ms").as_int64() < 1000);
  CHECK(r.took < 3s);
}

TEST_CASE_FIXTURE(server_and_directory,
                  "cli: cancelled: SIGINT stops the request in flight, exit 15, no -o file left") {
  child_process child(program,
                      {"fetch", "--json", "-o", directory.file("book.json"), server.url("/status/200?delay=10000")});
  REQUIRE(eventually([&] { return server->log().size() == 1; })); // the request is in flight
  child.send(SIGINT);
  const auto r = child.finish(5s);
  check_outcome(r, 15, "cancelled", 1);
  CHECK(text(r.json().at("interrupted_by")) == "SIGINT");
  CHECK(r.err.find("SIGINT") != std::string::npos);
  CHECK(r.took < 5s);
  CHECK(directory.entries().empty());
}

TEST_CASE("cli: cancelled: SIGTERM during a backoff wait, exit 15") {
  server_thread server;
  child_process child(program, {"fetch", "--json", server.url("/seq/wait?steps=503;retry-after=5,200")});
  REQUIRE(eventually([&] { return server->log().size() == 1; }));
  child.send(SIGTERM);
  const auto r = child.finish(5s);
  check_outcome(r, 15, "cancelled", 1);
  CHECK(text(r.json().at("interrupted_by")) == "SIGTERM");
  CHECK(r.took < 4s); // did not sit out the server's 5 s
  CHECK(server->log().size() == 1);
}

TEST_CASE_FIXTURE(server_and_directory, "cli: -o: written only on success, through a temporary file") {
  const std::string target = directory.file("book.json");

  auto r = run({"fetch", "-o", target, server.url("/status/200?body=first")});
  CHECK(r.status == 0);
  CHECK(r.out.empty());
  CHECK(read_file(target) == "first");

  SUBCASE("a failure leaves the previous file as it was, and nothing else") {
    r = run({"fetch", "-o", target, "--max-attempts", "1", server.url("/status/500?body=broken")});
    CHECK(r.status == 11);
  }
  SUBCASE("a rejection too") {
    r = run({"fetch", "-o", target, server.url("/status/404")});
    CHECK(r.status == 10);
  }
  CHECK(read_file(target) == "first");
  CHECK(directory.entries() == std::vector<std::string>{"book.json"});
}

TEST_CASE_FIXTURE(server_and_directory, "cli: -X, -H and -d reach the server as given, and -d @FILE reads a file") {
  const std::string payload = directory.file("order.json");
  std::ofstream(payload, std::ios::binary) << "{\"book\":42}\n";

  SUBCASE("-d pieces are joined with '&' and default to a form POST") {
    const auto r = run({"fetch", "-H", "X-Trace: t-1", "-d", "a=1", "-d", "b=2", server.url("/echo")});
    REQUIRE(r.status == 0);
    const auto echo = boost::json::parse(r.out).as_object();
    CHECK(text(echo.at("method")) == "POST");
    CHECK(text(echo.at("body")) == "a=1&b=2");
    bool trace = false;
    bool form = false;
    for (const auto& field : echo.at("headers").as_array()) {
      const auto& name = field.at("name").as_string();
      const auto& value = field.at("value").as_string();
      trace = trace || (name == "X-Trace" && value == "t-1");
      form = form || (name == "Content-Type" && value == "application/x-www-form-urlencoded");
    }
    CHECK(trace);
    CHECK(form);
  }
  SUBCASE("-X PUT with -d @FILE sends the file verbatim") {
    const auto r = run({"fetch", "-X", "PUT", "-H", "Content-Type: application/json", "-d", "@" + payload,
                        server.url("/echo")});
    REQUIRE(r.status == 0);
    const auto echo = boost::json::parse(r.out).as_object();
    CHECK(text(echo.at("method")) == "PUT");
    CHECK(text(echo.at("body")) == "{\"book\":42}\n");
  }
}

TEST_CASE("cli: the seed's permanent rules: out of credits and a refused scraper target") {
  server_thread server;
  SUBCASE("--out-of-credits-header") {
    const auto r = run({"fetch", "--json", "--out-of-credits-header", "x-api-remaining-credits=0",
                        server.url("/seq/credits?steps=429;header=x-api-remaining-credits:0,200")});
    check_outcome(r, 10, "rejected", 1);
    CHECK(text(r.json().at("category")) == "out_of_credits");
  }
  SUBCASE("a 429 without the header is still retried") {
    const auto r = run({"fetch", "--json", "--out-of-credits-header", "x-api-remaining-credits=0",
                        server.url("/seq/fast?steps=429,200")});
    check_outcome(r, 0, "succeeded", 2);
  }
  SUBCASE("--permanent-5xx-body") {
    const auto r = run({"fetch", "--json", "--permanent-5xx-body", "website returned HTTP 4[0-9][0-9]",
                        server.url("/seq/scrape?steps=503;body=The%20website%20returned%20HTTP%20403%20and%20could%20"
                                   "not%20be%20read.,200")});
    check_outcome(r, 10, "rejected", 1);
    CHECK(text(r.json().at("category")) == "upstream_refused");
  }
}

TEST_CASE("cli: -v: a timeline as it happens, and credentials never printed") {
  server_thread server;
  const auto r = run({"fetch", "-v", "-H", "Authorization: Bearer s3cret-token", "-H", "X-Api-Key: k3y-value", "-H",
                      "Cookie: session=c00kie", "-H", "X-Trace: visible",
                      server.url("/seq/verbose?steps=429;retry-after=1,502,200;header=Set-Cookie:sid%3Dsetc00kie")});
  CHECK(r.status == 0);
  // The response's cookie is in the URL's script only percent-encoded.
  for (const char* secret : {"s3cret-token", "k3y-value", "session=c00kie", "sid=setc00kie"}) {
    CAPTURE(secret);
    CHECK(r.err.find(secret) == std::string::npos);
    CHECK(r.out.find(secret) == std::string::npos);
  }
  CHECK(r.err.find("Authorization: [redacted]") != std::string::npos);
  CHECK(r.err.find("< Set-Cookie: [redacted]") != std::string::npos);
  CHECK(r.err.find("X-Trace: visible") != std::string::npos);
  CHECK(r.err.find("attempt 1 of 3 starts, allowance 10 s") != std::string::npos);
  CHECK(r.err.find("attempt 1 ends: HTTP 429") != std::string::npos);
  CHECK(r.err.find("(the server's Retry-After)") != std::string::npos);
  CHECK(r.err.find("attempt 2 ends: HTTP 502") != std::string::npos);
  CHECK(r.err.find("(local backoff)") != std::string::npos);
  CHECK(r.err.find("stop: succeeded after 3 attempts") != std::string::npos);
}

TEST_CASE("cli: -v and --json never print subscription, master or function keys, nor pwd, pass, jwt in a URL") {
  raw_server server([](unsigned, int fd) {
    raw_server::send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Master-Key: m4ster-reply\r\n"
                             "Connection: close\r\n\r\nok");
  });
  const auto r = run({"fetch", "-v", "--json", "-H", "Ocp-Apim-Subscription-Key: 0cp-secret", "-H",
                      "X-Master-Key: m4ster-secret", "-H", "x-functions-key: fn-secret", "-H", "X-Trace: visible",
                      server.url("/report?pwd=pwd-secret&pass=pass-secret&jwt=jwt-secret&page=2")});
  INFO(r.err);
  CHECK(r.status == 0);
  for (const char* secret :
       {"0cp-secret", "m4ster-secret", "fn-secret", "m4ster-reply", "pwd-secret", "pass-secret", "jwt-secret"}) {
    CAPTURE(secret);
    CHECK(r.err.find(secret) == std::string::npos);
    CHECK(r.out.find(secret) == std::string::npos);
  }
  CHECK(r.err.find("Ocp-Apim-Subscription-Key: [redacted]") != std::string::npos);
  CHECK(r.err.find("< X-Master-Key: [redacted]") != std::string::npos);
  CHECK(r.err.find("X-Trace: visible") != std::string::npos);
  CHECK(text(r.json().at("url")).find("page=2") != std::string::npos);
  CHECK(text(r.json().at("url")).find("pwd=REDACTED") != std::string::npos);
}

TEST_CASE("cli: the progress line: never on a pipe, shown on a terminal for a slow request") {
  server_thread server;
  SUBCASE("stderr is a pipe") {
    const auto r = run({"fetch", server.url("/status/200?delay=900")});
    CHECK(r.status == 0);
    CHECK(r.err.empty());
  }
  SUBCASE("stderr is a terminal") {
    child_process child(program, {"fetch", server.url("/status/200?delay=900")}, {.stderr_on_terminal = true});
    const auto r = child.finish(10s);
    CHECK(r.status == 0);
    CHECK(r.err.find("attempt 1 of 3") != std::string::npos);
    CHECK(r.err.find("\r\x1b[K") != std::string::npos); // and erased again
  }
  SUBCASE("--no-progress on a terminal") {
    child_process child(program, {"fetch", "--no-progress", server.url("/status/200?delay=900")},
                        {.stderr_on_terminal = true});
    const auto r = child.finish(10s);
    CHECK(r.status == 0);
    CHECK(r.err.empty());
  }
}

TEST_CASE("cli: --resolve: a name's fleet, where a 503 is never tried twice by one fetch") {
  // pricing:PORT is 127.0.0.2 (answering 503) and 127.0.0.3 (answering 200).
  coretry::test::server_fleet fleet({"127.0.0.2", "127.0.0.3"});
  server_thread* failing = &fleet[0];
  const std::string port = std::to_string(fleet.port());
  const std::string entry = "pricing:" + port + ":127.0.0.2,127.0.0.3";
  int met_the_503 = 0;
  for (int i = 0; i < 12; ++i) {
    CAPTURE(i);
    // Each server keeps its own place in a sequence: 127.0.0.3's first step
    // (503) is taken here, so that there it answers 200 and at 127.0.0.2 503.
    const std::string target = "/seq/fleet" + std::to_string(i) + "?steps=503,200";
    CHECK(run({"fetch", "--max-attempts", "1", "http://127.0.0.3:" + port + target}).status != 0);
    const std::size_t before = (*failing)->log().size();
    const auto r = run({"fetch", "--json", "--resolve", entry, "--backoff-initial", "0.01",
                        "http://pricing:" + port + target});
    const auto json = r.json();
    // The balancer sends the first attempt to either address (neither has
    // answered yet): 127.0.0.3 answers at once; after 127.0.0.2's 503 the
    // retry goes to 127.0.0.3, never to 127.0.0.2 again.
    if (attempt(json, 0).at("address").as_string() == "127.0.0.2:" + port) {
      ++met_the_503;
      check_outcome(r, 0, "succeeded", 2);
      CHECK(attempt(json, 1).at("address").as_string() == "127.0.0.3:" + port);
      CHECK((*failing)->log().size() == before + 1);
    } else {
      check_outcome(r, 0, "succeeded", 1);
      CHECK(attempt(json, 0).at("address").as_string() == "127.0.0.3:" + port);
      CHECK((*failing)->log().size() == before);
    }
  }
  CHECK(met_the_503 > 0); // all twelve first to 127.0.0.3: one chance in 4,096
}

TEST_CASE("cli: --balance first_to_connect: a new connection goes to the first address that connects") {
  coretry::test::server_fleet fleet({"127.0.0.2", "127.0.0.3"});
  const std::string port = std::to_string(fleet.port());
  // Listed second first: both connect at once, and the first listed serves
  // every fetch. The balancer (the default) would send about half to each.
  const std::string entry = "pricing:" + port + ":127.0.0.3,127.0.0.2";
  for (int i = 0; i < 8; ++i) {
    CAPTURE(i);
    const auto r =
        run({"fetch", "-v", "--balance", "first_to_connect", "--resolve", entry, "http://pricing:" + port + "/status/200"});
    CHECK(r.status == 0);
    CHECK(r.err.find("127.0.0.3:" + port) != std::string::npos);
    CHECK(r.err.find("127.0.0.2:" + port) == std::string::npos);
  }
  CHECK(fleet[0]->log().empty());
  CHECK(fleet[1]->log().size() == 8);
}

TEST_CASE("cli: -v and --json: each attempt's phases, and curl's cumulative times") {
  server_thread server;
  // Attempt 1 opens the connection and gets a 502 at once; attempt 2 reuses
  // it and waits 200 ms for its answer.
  const std::string url = server.url("/seq/phases?steps=502,200;delay=200");
  const auto verbose = run({"fetch", "-v", "--backoff-initial", "0.01", url});
  CHECK(verbose.status == 0);
  INFO("stderr: " << verbose.err);
  // Each says where its connection went.
  const std::string address = server.url("").substr(std::string("http://").size());
  const auto first = verbose.err.find("new connection to " + address + ": pool_wait ");
  const auto second = verbose.err.find("reused connection to " + address + ": pool_wait ");
  REQUIRE(first != std::string::npos);
  REQUIRE(second != std::string::npos);
  CHECK(first < second);
  CHECK(verbose.err.find("time_connect ", first) != std::string::npos);
  CHECK(verbose.err.find("time_starttransfer ", second) != std::string::npos);
  // An IP address is not looked up; a reused connection is not connected.
  CHECK(verbose.err.substr(first, second - first).find(" lookup ") == std::string::npos);
  CHECK(verbose.err.substr(second).find(" connect ") == std::string::npos);

  const auto r = run({"fetch", "--json", "--backoff-initial", "0.01", server.url("/seq/phases-json?steps=502,200;delay=200")});
  check_outcome(r, 0, "succeeded", 2);
  const auto json = r.json();
  const auto& opened = attempt(json, 0);
  const auto& reused = attempt(json, 1);
  CHECK_FALSE(opened.at("reused_connection").as_bool());
  CHECK(reused.at("reused_connection").as_bool());
  CHECK(opened.at("address").as_string() == address);
  CHECK(reused.at("address").as_string() == address);
  const auto& opened_phases = opened.at("phases_ms").as_object();
  const auto& reused_phases = reused.at("phases_ms").as_object();
  for (const char* name : {"pool_wait", "lookup", "connect", "tls", "write", "first_byte", "read"}) {
    CAPTURE(name);
    REQUIRE(opened_phases.contains(name)); // every phase named, null when not reached
    REQUIRE(reused_phases.contains(name));
  }
  CHECK(opened_phases.at("lookup").is_null());
  CHECK(opened_phases.at("tls").is_null());
  CHECK(opened_phases.at("connect").to_number<double>() >= 0.0);
  CHECK(opened.at("time_connect_ms").to_number<double>() >= 0.0);
  CHECK(opened.at("time_appconnect_ms").is_null());
  CHECK(reused_phases.at("connect").is_null());
  CHECK(reused.at("time_connect_ms").is_null());
  CHECK(reused_phases.at("first_byte").to_number<double>() >= 200.0);
  const double starttransfer = reused.at("time_starttransfer_ms").to_number<double>();
  const double total = reused.at("time_total_ms").to_number<double>();
  CHECK(starttransfer >= 200.0);
  CHECK(starttransfer <= total);
  // The phases fit inside the attempt as the engine timed it.
  CHECK(total <= static_cast<double>(reused.at("end_ms").as_int64() - reused.at("start_ms").as_int64()) + 1.0);
}
