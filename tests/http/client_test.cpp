// The HTTP client against a real server on loopback: real sockets, real time.
// Counts, stop reasons and what the server saw are asserted; durations only
// where a bound is the point (a drip cut off long before it would end).

#include <coretry/http/client.hpp>
#include <coretry/http/idempotency.hpp>
#include <coretry/http/tls.hpp>
#include <faults/fault_server.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include <doctest/doctest.h>

#include "blocking_client.hpp"
#include "hostile_server.hpp"
#include "phase_recorder.hpp"
#include "policies.hpp"
#include "server_thread.hpp"
#include "skip.hpp"

#include <array>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <thread>
#include <vector>

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using namespace std::chrono_literals;
using coretry::stop_reason;

namespace {

using coretry::test::loopback_policy;
using coretry::test::server_thread;

/// Records what the pool held whenever the engine went to sleep.
struct leased_during_backoff final : coretry::retry_observer {
  explicit leased_during_backoff(coretry::http::client& c) : client(c) {}
  void backoff_scheduled(const coretry::backoff_event&) noexcept override {
    seen.push_back(client.stats().leased);
  }
  coretry::http::client& client;
  std::vector<std::size_t> seen;
};

/// The blocking client, checking after each request that nothing stays
/// leased, with an observer of what the pool held in backoff.
struct harness : coretry_tests::blocking_client {
  using blocking_client::blocking_client;

  coretry::http::result send(beast_http::verb method, const std::string& url,
                             const coretry::http::request_options& options = {}, std::string body = {}) {
    coretry::http::result r = blocking_client::send(method, url, options, std::move(body));
    CHECK(client.stats().leased == 0); // nothing is leased once a request is over
    return r;
  }

  coretry::http::request_options with_policy(coretry::policy p = loopback_policy()) {
    coretry::http::request_options o;
    o.policy = p;
    o.observer = &watch;
    return o;
  }

  leased_during_backoff watch{client};
};

/// What most cases start from: a fault server and a client.
struct server_and_harness {
  server_thread server;
  harness h;
};

/// GETs `url`, an answer whose Retry-After asks for `delay` and then a 200:
/// checks that the retry waited the server's delay, and no more than the
/// spread, which is ours and small.
void check_waits_for_server(harness& h, const std::string& url, coretry::duration delay) {
  const auto r = h.send(beast_http::verb::get, url, h.with_policy());
  CHECK(r.reason == stop_reason::succeeded);
  REQUIRE(r.records.size() == 2);
  CHECK(r.records[1].wait_from == coretry::wait_source::server);
  CHECK(r.records[1].wait_before >= delay);
  CHECK(r.records[1].wait_before <= delay + 10ms);
}

/// GETs `target` from a fault server with a client made with `options`, one
/// of whose limits the response is over: checks that it was rejected as
/// response_too_large, with no retry, and returns the client's pool
/// afterwards.
coretry::http::pool_stats get_over_limit(coretry::http::client_options options, const std::string& target) {
  server_thread server;
  harness h(std::move(options));
  const auto r = h.send(beast_http::verb::get, server->base_url() + target, h.with_policy());
  CHECK(r.reason == stop_reason::rejected);
  CHECK(r.records[0].classified.category == "response_too_large");
  CHECK(server->log().size() == 1);
  return h.client.stats();
}

unsigned short closed_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  return acceptor.local_endpoint().port(); // closed when the acceptor goes
}

std::string write_temp(const std::string& content) {
  char name[] = "/tmp/coretry-ca-XXXXXX";
  const int fd = ::mkstemp(name);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(name) << content;
  return name;
}

} // namespace

TEST_CASE_FIXTURE(server_and_harness, "success with keep-alive reuse") {
  const auto first = h.send(beast_http::verb::get, server->base_url() + "/status/200", h.with_policy());
  const auto second = h.send(beast_http::verb::get, server->base_url() + "/status/200?body=again", h.with_policy());
  CHECK(first.reason == stop_reason::succeeded);
  CHECK(second.reason == stop_reason::succeeded);
  CHECK(second.value->res->body() == "again");
  CHECK_FALSE(first.value->reused_connection);
  CHECK(second.value->reused_connection);
  CHECK(h.client.stats().connections_opened == 1);
  CHECK(h.client.stats().idle == 1);
}

TEST_CASE_FIXTURE(server_and_harness,
                  "one client, many URLs in turn: each request goes where its own URL says, and a bad one is refused") {
  const std::string base = server->base_url() + "/status/200";
  auto body_of = [&](const std::string& url) {
    const auto r = h.send(beast_http::verb::get, url, h.with_policy());
    REQUIRE(r.reason == stop_reason::succeeded);
    return r.value->res->body();
  };
  CHECK(body_of(base + "?body=one") == "one");
  CHECK(body_of(base + "?body=two") == "two");
  CHECK(body_of(base + "?body=one") == "one");
  CHECK(body_of(base + "?body=one") == "one");
  // A URL too long to be remembered is read each time, and still right.
  const std::string long_body(3000, 'x');
  CHECK(body_of(base + "?body=" + long_body) == long_body);
  CHECK(body_of(base + "?body=three") == "three");
  // A bad URL after a good one is read, and refused, however alike they look.
  coretry::http::request req(beast_http::verb::get, "", 11);
  auto ignore = [](std::exception_ptr, coretry::http::result) {};
  CHECK_THROWS_AS(h.client.async_send(base + "?body=three ", req, {}, ignore), std::invalid_argument);
  CHECK_THROWS_AS(h.client.async_send(base + "?body=three ", req, {}, ignore), std::invalid_argument);
  CHECK(body_of(base + "?body=three") == "three");
}

TEST_CASE("a request's shared controls reach the engine: a negative cancellation_repeat is refused by name") {
  asio::io_context io;
  coretry::http::client c(io.get_executor());
  coretry::http::request req(beast_http::verb::get, "", 11);
  auto ignore = [](std::exception_ptr, coretry::http::result) {};
  coretry::http::request_options options;
  options.cancellation_repeat = -1ms;
  CHECK_THROWS_WITH_AS(c.async_send("http://127.0.0.1:9/", req, options, ignore),
                       doctest::Contains("cancellation_repeat"), std::invalid_argument);
  options.redirects.follow = true;
  CHECK_THROWS_WITH_AS(c.async_send("http://127.0.0.1:9/", req, options, ignore),
                       doctest::Contains("cancellation_repeat"), std::invalid_argument);
  io.run();
  CHECK(c.stats().open == 0);
}

TEST_CASE_FIXTURE(server_and_harness, "502 then 200, and no connection is leased during a backoff sleep") {
  const auto r = h.send(beast_http::verb::get, server->base_url() + "/seq/a?steps=502,200", h.with_policy());
  CHECK(r.reason == stop_reason::succeeded);
  CHECK(r.attempts == 2);
  CHECK(r.records[0].classified.category == "http_502");
  CHECK(server->log().size() == 2);
  REQUIRE(h.watch.seen.size() == 1);
  CHECK(h.watch.seen[0] == 0);
}

TEST_CASE_FIXTURE(server_and_harness, "429 with Retry-After: 1 waits at least the server's second") {
  check_waits_for_server(h, server->base_url() + "/seq/b?steps=429;retry-after=1,200", 1s);
}

TEST_CASE_FIXTURE(server_and_harness, "503 with an HTTP-date Retry-After is measured against the server's Date") {
  // Date and Retry-After come from the same server clock: exactly 2 s apart.
  check_waits_for_server(h, server->base_url() + "/seq/c?steps=503;retry-after-date=%2B2,200", 2s);
}

TEST_CASE_FIXTURE(server_and_harness, "a Retry-After beyond the deadline stops at once") {
  coretry::policy p = loopback_policy();
  p.overall_deadline = 1s;
  const auto r = h.send(beast_http::verb::get, server->base_url() + "/status/503?retry-after=1", h.with_policy(p));
  CHECK(r.reason == stop_reason::server_delay_too_long);
  CHECK(r.attempts == 1);
  CHECK(r.value->res->result_int() == 503);
}

TEST_CASE("a drip-fed body is cut at the attempt deadline") {
  server_thread server;
  coretry::http::client_options options;
  options.idle_timeout = 500ms; // each byte arrives well inside it
  harness h(options);
  coretry::policy p = loopback_policy();
  p.max_attempts = 1;
  p.attempt_limit = 300ms;
  const auto start = std::chrono::steady_clock::now();
  const auto r = h.send(beast_http::verb::get, server->base_url() + "/status/200?drip=100:50", h.with_policy(p));
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(r.reason == stop_reason::attempts_exhausted);
  CHECK(r.records[0].error == coretry::attempt_error::timed_out);
  CHECK(r.value->reached == coretry::http::stage::reading);
  CHECK_FALSE(r.value->res);
  CHECK(took < 5s); // the whole drip would take 5 s
  CHECK(h.client.stats().open == 0); // a timed-out connection is closed, never pooled
}

TEST_CASE("a read-inactivity limit cuts a silent server") {
  server_thread server;
  coretry::http::client_options options;
  options.idle_timeout = 100ms;
  harness h(options);
  coretry::policy p = loopback_policy();
  p.max_attempts = 1;
  const auto r = h.send(beast_http::verb::get, server->base_url() + "/status/200?hang-after-headers", h.with_policy(p));
  CHECK(r.reason == stop_reason::attempts_exhausted);
  CHECK(r.value->error == asio::error::timed_out);
  CHECK(r.records[0].end < 2s); // well before the attempt's own 2 s limit
}

TEST_CASE_FIXTURE(server_and_harness, "a server that hangs after the headers times out and is not reused") {
  coretry::policy p = loopback_policy();
  p.max_attempts = 2;
  p.attempt_limit = 200ms;
  const auto r = h.send(beast_http::verb::get, server->base_url() + "/status/200?hang-after-headers", h.with_policy(p));
  CHECK(r.reason == stop_reason::attempts_exhausted);
  CHECK(r.attempts == 2);
  CHECK(r.records[1].error == coretry::attempt_error::timed_out);
  CHECK(h.client.stats().connections_opened == 2);
  CHECK(h.client.stats().open == 0);
}

TEST_CASE("connection refused is retried, even for a POST: it never reached a server") {
  harness h;
  const auto r = h.send(beast_http::verb::post, "http://127.0.0.1:" + std::to_string(closed_port()) + "/orders",
                        h.with_policy(), "{}");
  CHECK(r.reason == stop_reason::attempts_exhausted);
  CHECK(r.attempts == 3);
  CHECK(r.records[0].classified.delivered == coretry::delivery::never_sent);
  CHECK(r.value->error == asio::error::connection_refused);
}

namespace {

/// A client whose one pooled connection the server closed while it sat idle:
/// the server restarted on the same port after the first request.
struct stale_pool {
  stale_pool() {
    CHECK(h.send(beast_http::verb::get, url, h.with_policy()).succeeded());
    CHECK(h.client.stats().idle == 1);
    server.reset(); // closes the idle connection from the server's side
    coretry::faults::fault_server_options again;
    again.listen = "127.0.0.1:" + std::to_string(port);
    server.emplace(again);
  }

  std::optional<server_thread> server{std::in_place};
  const unsigned short port = (*server)->port();
  harness h;
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/status/200";
};

} // namespace

TEST_CASE("a stale pooled connection is detected before reuse") {
  stale_pool t;
  // A non-idempotent POST: had the stale connection been used, its outcome
  // would be ambiguous. It is discarded instead, and the POST succeeds once.
  const auto r = t.h.send(beast_http::verb::post, t.url, t.h.with_policy(), "{}");
  CHECK(r.reason == stop_reason::succeeded);
  CHECK(r.attempts == 1);
  CHECK(t.h.client.stats().stale_discarded == 1);
  CHECK((*t.server)->log().size() == 1);
}

TEST_CASE("a GET on a connection the server closed goes again on a fresh one, within the attempt") {
  stale_pool t;
  // Repeatable requests skip the check before reuse; the closed connection
  // shows itself when used, and costs neither an attempt nor a backoff.
  const auto r = t.h.send(beast_http::verb::get, t.url, t.h.with_policy());
  CHECK(r.reason == stop_reason::succeeded);
  CHECK(r.attempts == 1);
  CHECK(r.total_backoff == coretry::duration::zero());
  CHECK_FALSE(r.value->reused_connection);
  CHECK(t.h.client.stats().stale_discarded == 1);
  CHECK(t.h.client.stats().connections_opened == 2);
  CHECK((*t.server)->log().size() == 1);
}

TEST_CASE_FIXTURE(server_and_harness, "a POST that times out is not retried") {
  coretry::policy p = loopback_policy();
  p.attempt_limit = 250ms;
  const auto r = h.send(beast_http::verb::post, server->base_url() + "/status/200?delay=1000", h.with_policy(p), "{}");
  CHECK(r.reason == stop_reason::outcome_unknown);
  CHECK(r.attempts == 1);
  CHECK(server->log().size() == 1);
}

TEST_CASE_FIXTURE(server_and_harness, "a POST with an Idempotency-Key is retried with the same key and payload") {
  auto options = h.with_policy();
  options.generate_idempotency_key = true;
  const auto r = h.send(beast_http::verb::post, server->base_url() + "/seq/p?steps=503,200", options, "{\"book\":42}");
  CHECK(r.reason == stop_reason::succeeded);
  CHECK(r.attempts == 2);
  const auto log = server->log();
  REQUIRE(log.size() == 2);
  REQUIRE(log[0].idempotency_key);
  CHECK(log[0].idempotency_key->size() == 36); // a UUID
  CHECK(log[0].idempotency_key == log[1].idempotency_key);
  CHECK(r.value->idempotency_key == *log[0].idempotency_key); // the caller can see the key it was given
  CHECK(log[0].body_length == log[1].body_length);
}

TEST_CASE_FIXTURE(server_and_harness, "a POST without a key is not retried after a 503") {
  const auto r = h.send(beast_http::verb::post, server->base_url() + "/seq/q?steps=503,200", h.with_policy(), "{}");
  CHECK(r.reason == stop_reason::rejected);
  CHECK(r.attempts == 1);
}

TEST_CASE_FIXTURE(server_and_harness,
                  "the seed's extra rules: out of credits and a refused scraper target are permanent") {
  auto options = h.with_policy();
  options.classifiers.push_back(coretry::http::permanent_429_when_header("x-api-remaining-credits", "0"));
  options.classifiers.push_back(
      coretry::http::permanent_5xx_when_body_matches("website returned HTTP 4[0-9][0-9]", coretry::http::letter_case::insensitive));
  SUBCASE("credits header exactly 0: out of credits") {
    const auto r = h.send(beast_http::verb::get,
                          server->base_url() + "/seq/d?steps=429;header=x-api-remaining-credits:0,200", options);
    CHECK(r.reason == stop_reason::rejected);
    CHECK(r.records[0].classified.category == "out_of_credits");
  }
  SUBCASE("no credits header is not zero: retried") {
    const auto r = h.send(beast_http::verb::get, server->base_url() + "/seq/e?steps=429,200", options);
    CHECK(r.reason == stop_reason::succeeded);
  }
  SUBCASE("a 503 saying the website returned HTTP 403") {
    const auto r = h.send(beast_http::verb::get,
                          server->base_url() +
                              "/seq/f?steps=503;body=The%20website%20returned%20HTTP%20403%20and%20could%20not%20be%20read.,200",
                          options);
    CHECK(r.reason == stop_reason::rejected);
    CHECK(r.attempts == 1);
  }
}

TEST_CASE_FIXTURE(server_and_harness, "the validation hook turns a wrong 200 into a clear permanent error") {
  auto options = h.with_policy();
  options.validate = [](const coretry::http::response& res) -> std::optional<std::string> {
    if (res.body().size() != 40)
      return "asked for 40 characters, got " + std::to_string(res.body().size());
    return std::nullopt;
  };
  const auto r = h.send(beast_http::verb::get, server->base_url() + "/status/200?body=Gfs3fJgV01PI", options);
  CHECK(r.reason == stop_reason::rejected);
  CHECK(r.attempts == 1);
  CHECK(r.value->problem == "asked for 40 characters, got 12");
}

TEST_CASE("a response over the body limit is permanent, never retried") {
  coretry::http::client_options options;
  options.body_limit = 10;
  get_over_limit(options, "/status/200?body=0123456789abcdefghijklmnopqrstuvwxyz");
}

TEST_CASE("response headers over the header limit are permanent, never retried") {
  coretry::http::client_options options;
  options.header_limit = 1024;
  CHECK(get_over_limit(options, "/status/503?header=X-Padding:" + std::string(2000, 'x')).open == 0);
}

TEST_CASE("HTTPS with the test CA succeeds and verifies the peer") {
  coretry::faults::fault_server_options tls;
  tls.tls = true;
  server_thread server(tls);
  coretry::http::client_options options;
  options.ca_file = write_temp(server->ca_certificate_pem());
  harness h(options);
  coretry_tests::phase_recorder phases;
  auto request = h.with_policy();
  request.phases = &phases;
  const std::string url = "https://localhost:" + std::to_string(server->port()) + "/seq/t?steps=502,200";
  const auto r = h.send(beast_http::verb::get, url, request);
  const auto again = h.send(beast_http::verb::get, url, request);
  std::remove(options.ca_file.c_str());
  CHECK(r.reason == stop_reason::succeeded);
  CHECK(r.attempts == 2);
  CHECK(again.succeeded());
  CHECK(again.value->reused_connection); // a TLS connection is pooled like any other
  CHECK(h.client.stats().connections_opened == 1);

  // The handshake is a phase of the attempt that opened the connection
  // (after looking "localhost" up), and of no attempt reusing it.
  REQUIRE(phases.attempts.size() == 3);
  using coretry::phase;
  const auto& opened = phases.attempts[0].phases;
  CHECK_FALSE(phases.attempts[0].reused_connection);
  CHECK(opened.reached(phase::lookup));
  CHECK(opened.reached(phase::connect));
  REQUIRE(opened.reached(phase::tls));
  CHECK(*opened[phase::tls] > coretry::duration::zero());
  CHECK(opened.reached(phase::read));
  for (std::size_t i = 1; i < phases.attempts.size(); ++i) {
    CHECK(phases.attempts[i].reused_connection);
    CHECK_FALSE(phases.attempts[i].phases.reached(phase::tls));
    CHECK_FALSE(phases.attempts[i].phases.reached(phase::lookup));
  }
}

TEST_CASE("TLS verification failures are permanent") {
  coretry::faults::pki_options pki;
  SUBCASE("wrong host name") {
    pki.dns_names = {"pricing.example"};
    pki.ip_addresses = {};
  }
  SUBCASE("untrusted issuer") { pki.signed_by_ca = false; }
  SUBCASE("expired certificate") {
    pki.not_before = -48h;
    pki.not_after = -24h;
  }
  coretry::faults::fault_server_options tls;
  tls.tls = true;
  tls.pki = coretry::faults::generate_test_pki(pki);
  server_thread server(tls);
  coretry::http::client_options options;
  options.ca_file = write_temp(server->ca_certificate_pem());
  harness h(options);
  const auto r = h.send(beast_http::verb::get, "https://localhost:" + std::to_string(server->port()) + "/status/200",
                        h.with_policy());
  std::remove(options.ca_file.c_str());
  CHECK(r.reason == stop_reason::rejected);
  CHECK(r.attempts == 1);
  CHECK(r.records[0].classified.category == "tls_verification");
  CHECK(h.client.stats().open == 0);
}

TEST_CASE("a CA file that is missing or not PEM is refused when the client is made") {
  asio::io_context io;
  coretry::http::client_options missing;
  missing.ca_file = "/nonexistent/ca.pem";
  CHECK_THROWS_WITH_AS(coretry::http::client(io.get_executor(), missing), doctest::Contains("cannot read"),
                       std::invalid_argument);
  coretry::http::client_options garbage;
  garbage.ca_file = write_temp("not a certificate");
  CHECK_THROWS_WITH_AS(coretry::http::client(io.get_executor(), garbage), doctest::Contains("no usable PEM"),
                       std::invalid_argument);
  std::remove(garbage.ca_file.c_str());
}

TEST_CASE("ca_file_problem names the file and the problem, and accepts a PEM certificate") {
  const auto missing = coretry::http::ca_file_problem("/nonexistent/ca.pem");
  REQUIRE(missing);
  CHECK(missing->find("cannot read") != std::string::npos);
  CHECK(missing->find("/nonexistent/ca.pem") != std::string::npos);
  const std::string garbage = write_temp("not a certificate");
  const auto not_pem = coretry::http::ca_file_problem(garbage);
  std::remove(garbage.c_str());
  REQUIRE(not_pem);
  CHECK(not_pem->find("no usable PEM certificate") != std::string::npos);
  CHECK(not_pem->find(garbage) != std::string::npos);
  const std::string ca = write_temp(coretry::faults::generate_test_pki().ca_pem);
  CHECK_FALSE(coretry::http::ca_file_problem(ca));
  std::remove(ca.c_str());
}

TEST_CASE("new_idempotency_key: a fresh version 4 UUID each time") {
  const std::regex uuid_v4("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
  const std::string one = coretry::http::new_idempotency_key();
  const std::string two = coretry::http::new_idempotency_key();
  CHECK(std::regex_match(one, uuid_v4));
  CHECK(std::regex_match(two, uuid_v4));
  CHECK(one != two);
}

TEST_CASE("bad input is refused before anything is sent") {
  harness h;
  coretry::http::request req(beast_http::verb::get, "", 11);
  auto ignore = [](std::exception_ptr, coretry::http::result) {};
  CHECK_THROWS_WITH_AS(h.client.async_send("localhost/books", req, {}, ignore), doctest::Contains("absolute URL"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(h.client.async_send("ftp://localhost/books", req, {}, ignore), doctest::Contains("scheme"),
                       std::invalid_argument);
  coretry::http::request bad = req;
  bad.set("X-Note", "one\r\nInjected: yes");
  CHECK_THROWS_WITH_AS(h.client.async_send("http://localhost/books", bad, {}, ignore), doctest::Contains("X-Note"),
                       std::invalid_argument);
  coretry::http::request_options absurd;
  absurd.policy.max_attempts = 0;
  CHECK_THROWS_WITH_AS(h.client.async_send("http://localhost/books", req, absurd, ignore),
                       doctest::Contains("max_attempts"), std::invalid_argument);

  // A target that would carry more than a target on the request line.
  for (const char* target : {"/books HTTP/1.1\r\nX-Injected: yes", "/books\n", "/two words", "/tab\there"}) {
    CAPTURE(target);
    coretry::http::request split(beast_http::verb::get, target, 11);
    CHECK_THROWS_WITH_AS(h.client.async_send("http://localhost/books", split, {}, ignore),
                         doctest::Contains("request target"), std::invalid_argument);
  }

  // The message names a malformed URL without the credentials in it.
  try {
    h.client.async_send("http://user:pa55word@local host/books?api_key=k3y", req, {}, ignore);
    FAIL("a URL with a space was accepted");
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    CHECK(message.find("absolute URL") != std::string::npos);
    CHECK(message.find("pa55word") == std::string::npos);
    CHECK(message.find("k3y") == std::string::npos);
  }
}

TEST_CASE("client options that make no sense are refused when the client is made") {
  asio::io_context io;
  const auto refused = [&](coretry::http::client_options o, const char* named) {
    CAPTURE(named);
    CHECK_THROWS_WITH_AS(coretry::http::client(io.get_executor(), o), doctest::Contains(named), std::invalid_argument);
  };
  coretry::http::client_options o;
  o.connect_timeout = -1ms;
  refused(o, "connect_timeout");
  o = {};
  o.idle_timeout = -1ms;
  refused(o, "idle_timeout");
  o = {};
  o.pool_idle_timeout = -1s;
  refused(o, "pool_idle_timeout");
  o = {};
  o.max_connections_per_origin = 0;
  refused(o, "max_connections_per_origin");
  o = {};
  o.header_limit = 0;
  refused(o, "header_limit");
  o = {};
  o.line_limit = 0;
  refused(o, "line_limit");
  o = {};
  o.user_agent = "coretry\r\nX-Injected: 1";
  refused(o, "user_agent");
  // Huge limits are allowed: they saturate, they do not wrap.
  o = {};
  o.connect_timeout = coretry::duration::max();
  o.idle_timeout = coretry::duration::max();
  server_thread server;
  harness h{o};
  CHECK(h.send(beast_http::verb::get, server->base_url() + "/status/200", h.with_policy()).succeeded());
}

namespace {

/// A one-connection server that answers each request with the next canned
/// bytes, for exchanges the fault server cannot script (several responses
/// in one write).
class canned_server {
public:
  /// With `close_after`, the server ends the connection once it has
  /// answered, as a body delimited by the connection's end needs.
  explicit canned_server(std::vector<std::string> answers, bool close_after = false)
      : acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}), answers_(std::move(answers)) {
    thread_ = std::thread([this, close_after] {
      boost::system::error_code ec;
      asio::ip::tcp::socket socket(io_);
      acceptor_.accept(socket, ec);
      std::string pending;
      for (const std::string& answer : answers_) {
        while (pending.find("\r\n\r\n") == std::string::npos) {
          char buffer[1024];
          const std::size_t n = socket.read_some(asio::buffer(buffer), ec);
          if (ec) return;
          pending.append(buffer, n);
        }
        pending.erase(0, pending.find("\r\n\r\n") + 4);
        asio::write(socket, asio::buffer(answer), ec);
        if (ec) return;
        ++answered;
      }
      if (close_after) socket.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
      char rest[64];
      socket.read_some(asio::buffer(rest), ec); // until the client closes
    });
  }
  ~canned_server() {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }
  std::atomic<int> answered{0};

private:
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  std::vector<std::string> answers_;
  std::thread thread_;
};

/// GETs what a canned server answers with `answer` (ending the connection
/// after it with `close_after`): checks that the body read was `body` and
/// that the connection was not kept in the pool.
void check_read_and_not_pooled(std::string answer, bool close_after, const std::string& body) {
  canned_server server({std::move(answer)}, close_after);
  harness h;
  const auto r = h.send(beast_http::verb::get, server.url() + "/x", h.with_policy());
  REQUIRE(r.succeeded());
  CHECK(r.value->res->body() == body);
  CHECK(h.client.stats().idle == 0);
  CHECK(h.client.stats().open == 0);
}

} // namespace

TEST_CASE("interim 1xx responses are skipped, and the final response is the request's own") {
  canned_server server({"HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\n"
                        "HTTP/1.1 100 Continue\r\n\r\n"
                        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst",
                        "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond"});
  harness h;
  const auto first = h.send(beast_http::verb::get, server.url() + "/first", h.with_policy());
  const auto second = h.send(beast_http::verb::get, server.url() + "/second", h.with_policy());
  REQUIRE(first.succeeded());
  CHECK(first.value->res->body() == "first");
  REQUIRE(second.succeeded());
  CHECK(second.value->res->body() == "second");
  CHECK(second.value->reused_connection);
}

TEST_CASE("a connection with bytes beyond the response is closed, not pooled") {
  check_read_and_not_pooled(
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale", false, "ok");
}

TEST_CASE("a body that ends with the connection is read whole, and the connection is not pooled") {
  check_read_and_not_pooled("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end", true, "until the end");
}

TEST_CASE("a request that asks to close its connection does not leave it in the pool") {
  canned_server server({"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"});
  harness h;
  coretry::http::request req(beast_http::verb::get, "", 11);
  req.set(beast_http::field::connection, "close");
  std::optional<coretry::http::result> result;
  h.client.async_send(server.url() + "/x", std::move(req), h.with_policy(),
                      [&](std::exception_ptr e, coretry::http::result r) {
                        REQUIRE_FALSE(e);
                        result = std::move(r);
                      });
  h.io.run();
  REQUIRE(result);
  REQUIRE(result->succeeded());
  CHECK(h.client.stats().idle == 0);
  CHECK(h.client.stats().open == 0);
}

TEST_CASE("idle connections past the pool's idle timeout are closed whatever their origin") {
  server_thread first;
  server_thread second;
  coretry::http::client_options options;
  options.pool_idle_timeout = coretry::duration::zero(); // every idle connection expires at once
  harness h{options};
  REQUIRE(h.send(beast_http::verb::get, first->base_url() + "/status/200", h.with_policy()).succeeded());
  CHECK(h.client.stats().idle == 1); // just given back: not yet past the limit
  REQUIRE(h.send(beast_http::verb::get, second->base_url() + "/status/200", h.with_policy()).succeeded());
  // The first origin's connection is closed although nothing asked for it again.
  CHECK(h.client.stats().idle == 1);
  CHECK(h.client.stats().open == 1);
}

TEST_CASE("an IPv6 address needs no lookup and is its own Host") {
  coretry::faults::fault_server_options options;
  options.listen = "[::1]:0";
  std::optional<server_thread> server;
  try {
    server.emplace(options);
  } catch (const boost::system::system_error& e) {
    coretry::test::skip_test(std::string("no IPv6 loopback here: cannot listen on [::1]: ") + e.what());
    return;
  }
  harness h;
  const std::string url = "http://[::1]:" + std::to_string((*server)->port()) + "/status/200";
  REQUIRE(h.send(beast_http::verb::get, url, h.with_policy()).succeeded());
  CHECK(h.client.stats().lookups == 0);
  CHECK(h.client.stats().connections_opened == 1);
  const auto log = (*server)->log();
  REQUIRE(log.size() == 1);
  bool host_seen = false;
  for (const auto& [name, value] : log[0].fields)
    if (name == "Host") host_seen = value == "[::1]:" + std::to_string((*server)->port());
  CHECK(host_seen);
}

TEST_CASE_FIXTURE(server_and_harness, "the decorator sets per-attempt headers on each attempt's own copy") {
  auto options = h.with_policy();
  std::vector<std::chrono::milliseconds> allowances;
  options.decorate = [&](coretry::http::request& req, const coretry::attempt_context<std::chrono::steady_clock>& c) {
    req.set("X-Attempt", std::to_string(c.number));
    allowances.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(c.allowance));
  };
  const auto r = h.send(beast_http::verb::get, server->base_url() + "/seq/d?steps=503,200", options);
  CHECK(r.reason == stop_reason::succeeded);
  const auto log = server->log();
  REQUIRE(log.size() == 2);
  auto field = [](const coretry::faults::logged_request& entry, std::string_view name) {
    for (const auto& [n, v] : entry.fields)
      if (n == name) return v;
    return std::string("(absent)");
  };
  CHECK(field(log[0], "X-Attempt") == "1");
  CHECK(field(log[1], "X-Attempt") == "2");
  REQUIRE(allowances.size() == 2);
  CHECK(allowances[0] <= loopback_policy().attempt_limit);

  // A decorator that breaks the framing is refused, permanently.
  options.decorate = [](coretry::http::request& req, const auto&) { req.set("X-Bad", "a\r\nInjected: 1"); };
  const auto bad = h.send(beast_http::verb::get, server->base_url() + "/status/200", options);
  CHECK(bad.reason == stop_reason::rejected);
  CHECK(bad.attempts == 1);
  CHECK(bad.value->problem.find("X-Bad") != std::string::npos);
  CHECK(server->log().size() == 2); // never sent
}

TEST_CASE_FIXTURE(server_and_harness, "credentials never reach the server log in clear, other fields do") {
  coretry::http::request req(beast_http::verb::get, "", 11);
  req.set(beast_http::field::authorization, "Bearer s3cret");
  req.set("X-Api-Key", "k3y");
  req.set("X-Request-Id", "r-1");
  std::optional<coretry::http::result> result;
  const coretry::http::request sent = req;
  h.client.async_send(server->base_url() + "/status/200", std::move(req), h.with_policy(),
                      [&](std::exception_ptr, coretry::http::result r) { result = std::move(r); });
  h.io.run();
  h.io.restart();
  REQUIRE(result);
  REQUIRE(result->succeeded());
  const auto log = server->log();
  REQUIRE(log.size() == 1);
  std::map<std::string, std::string> logged;
  for (const auto& [name, value] : log[0].fields) {
    CHECK(value.find("s3cret") == std::string::npos);
    CHECK(value.find("k3y") == std::string::npos);
    logged[name] = value;
  }
  // The credentials were logged, redacted; the other fields as sent.
  CHECK(logged["Authorization"] == "[redacted]");
  CHECK(logged["X-Api-Key"] == "[redacted]");
  CHECK(logged["X-Request-Id"] == "r-1");
  CHECK(logged.count("Host") == 1);

  // What the client puts on the wire, read raw by a server that logs
  // nothing: the credentials do reach a server (the log is what hides them).
  std::string raw;
  coretry_tests::hostile_server wire([&](coretry_tests::hostile_server::peer& peer) {
    if (peer.read_request()) peer.send("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    peer.wait_for_close();
  });
  result.reset();
  h.client.async_send(wire.url() + "/status/200", sent, h.with_policy(),
                      [&](std::exception_ptr, coretry::http::result r) { result = std::move(r); });
  h.io.run();
  REQUIRE(result);
  REQUIRE(result->succeeded());
  const auto heads = wire.requests();
  REQUIRE(heads.size() == 1);
  CHECK(heads[0].find("\r\nAuthorization: Bearer s3cret\r\n") != std::string::npos);
  CHECK(heads[0].find("\r\nX-Api-Key: k3y\r\n") != std::string::npos);
  CHECK(heads[0].find("\r\nX-Request-Id: r-1\r\n") != std::string::npos);
}

TEST_CASE("the head on the wire: request line, Host first, the caller's fields in order, User-Agent last") {
  coretry_tests::hostile_server wire([&](coretry_tests::hostile_server::peer& peer) {
    while (peer.read_request()) peer.send("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  });
  harness h;
  const auto send = [&](coretry::http::request req, const std::string& url) {
    std::optional<coretry::http::result> result;
    h.client.async_send(url, std::move(req), h.with_policy(),
                        [&](std::exception_ptr, coretry::http::result r) { result = std::move(r); });
    h.io.run();
    h.io.restart();
    REQUIRE(result);
    CHECK(result->succeeded());
  };
  const std::string authority = wire.url().substr(std::string("http://").size());

  // The URL's target, the client's Host (with the port that is not the
  // default) before the caller's fields, which keep their order, and the
  // client's User-Agent after them: all on a connection used twice.
  coretry::http::request req(beast_http::verb::get, "", 11);
  req.set("X-First", "1");
  req.set("X-Second", "2");
  send(req, wire.url() + "/books/7?q=a%20b");
  send(req, wire.url() + "/books/7?q=a%20b");
  // The caller's own Host and User-Agent replace the client's; its target
  // replaces the URL's; HTTP/1.0 is said as such.
  coretry::http::request own(beast_http::verb::get, "/own", 10);
  own.set(beast_http::field::host, "books.example");
  own.set(beast_http::field::user_agent, "mine/2");
  own.keep_alive(true);
  send(own, wire.url() + "/ignored");

  const auto heads = wire.requests();
  REQUIRE(heads.size() == 3);
  const std::string expected = "GET /books/7?q=a%20b HTTP/1.1\r\nHost: " + authority +
                               "\r\nX-First: 1\r\nX-Second: 2\r\nUser-Agent: coretry/0.1\r\n\r\n";
  CHECK(heads[0] == expected);
  CHECK(heads[1] == expected);
  CHECK(heads[2].rfind("GET /own HTTP/1.0\r\n", 0) == 0);
  CHECK(heads[2].find("\r\nHost: books.example\r\n") != std::string::npos);
  CHECK(heads[2].find("Host: 127.0.0.1") == std::string::npos);
  CHECK(heads[2].find("\r\nUser-Agent: mine/2\r\n") != std::string::npos);
  CHECK(heads[2].find("coretry/0.1") == std::string::npos);
  CHECK(h.client.stats().connections_opened == 1);
}

TEST_CASE("a body a decorator frames as chunked goes as one chunk and its end, an empty one as its end alone") {
  std::vector<std::string> bodies;
  std::mutex bodies_mutex;
  coretry_tests::hostile_server wire([&](coretry_tests::hostile_server::peer& peer) {
    while (peer.read_request()) {
      std::string body = peer.read_through("0\r\n\r\n");
      {
        std::lock_guard lock(bodies_mutex);
        bodies.push_back(std::move(body));
      }
      peer.send("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    }
  });
  harness h;
  // The client frames a body by its length (prepare_payload); a decorator
  // may ask for chunked framing instead.
  auto options = h.with_policy();
  options.decorate = [](coretry::http::request& req, const auto&) {
    req.erase(beast_http::field::content_length);
    req.chunked(true);
  };
  for (const std::string& payload : {std::string("hello, chunks"), std::string()}) {
    coretry::http::request req(beast_http::verb::put, "/upload", 11);
    req.body() = payload;
    std::optional<coretry::http::result> result;
    h.client.async_send(wire.url(), std::move(req), options,
                        [&](std::exception_ptr, coretry::http::result r) { result = std::move(r); });
    h.io.run();
    h.io.restart();
    REQUIRE(result);
    CHECK(result->succeeded());
  }
  const auto heads = wire.requests();
  REQUIRE(heads.size() == 2);
  CHECK(heads[0].find("\r\nTransfer-Encoding: chunked\r\n") != std::string::npos);
  CHECK(heads[0].find("Content-Length") == std::string::npos);
  std::lock_guard lock(bodies_mutex);
  REQUIRE(bodies.size() == 2);
  CHECK(bodies[0] == "d\r\nhello, chunks\r\n0\r\n\r\n");
  CHECK(bodies[1] == "0\r\n\r\n");
}

TEST_CASE_FIXTURE(server_and_harness, "the decorator sees the request as it is sent: target, Host and User-Agent") {
  std::string seen;
  auto options = h.with_policy();
  options.decorate = [&](coretry::http::request& req, const auto&) {
    seen = std::string(req.target()) + " | " + std::string(req[beast_http::field::host]) + " | " +
           std::string(req[beast_http::field::user_agent]);
  };
  const auto r = h.send(beast_http::verb::get, server->base_url() + "/status/200", options);
  CHECK(r.succeeded());
  CHECK(seen == "/status/200 | " + server->base_url().substr(std::string("http://").size()) + " | coretry/0.1");
  const auto log = server->log();
  REQUIRE(log.size() == 1);
  std::size_t hosts = 0;
  for (const auto& field : log[0].fields) hosts += field.first == "Host";
  CHECK(hosts == 1); // not twice: the client's is not added to the decorated copy's own
}

TEST_CASE("pool: a request too late for the freed connection is refused at once, never sent, and one that can use it "
          "gets it") {
  server_thread server;
  coretry::http::client_options options;
  options.max_connections_per_origin = 1;
  harness h(options);
  const auto slow = [&server](int status) { return server.url("/status/" + std::to_string(status) + "?delay=100"); };
  // One exchange first: the origin's exchanges take about 100 ms.
  REQUIRE(h.send(beast_http::verb::get, slow(200), h.with_policy()).reason == stop_reason::succeeded);
  REQUIRE(h.client.stats().idle == 1);
  server->clear();

  // At once, on the one connection: the first holds it about 100 ms; the
  // second, with a 180 ms attempt, then has about 80 ms left; the third 2 s.
  std::array<std::optional<coretry::http::result>, 3> results;
  const std::array<coretry::duration, 3> limits{1s, 180ms, 2s};
  for (std::size_t i = 0; i < 3; ++i) {
    coretry::policy p = coretry::test::loopback_policy(5s, limits[i]);
    p.max_attempts = 1;
    h.client.async_send(slow(200 + static_cast<int>(i)), coretry::http::request(beast_http::verb::get, "", 11),
                        h.with_policy(p), [&results, i](std::exception_ptr e, coretry::http::result r) {
                          REQUIRE_FALSE(e);
                          results[i] = std::move(r);
                        });
  }
  h.io.run();
  h.io.restart();
  for (const auto& r : results) REQUIRE(r);

  CHECK(results[0]->reason == stop_reason::succeeded);
  const coretry::http::result& late = *results[1];
  CHECK(late.reason == stop_reason::attempts_exhausted);
  REQUIRE(late.records.size() == 1);
  CHECK(late.records[0].classified.category == "pool_too_late");
  CHECK(late.records[0].classified.status == coretry::attempt_status::transient);
  CHECK(late.records[0].classified.delivered == coretry::delivery::never_sent);
  CHECK(late.records[0].end - late.records[0].start < 170ms); // refused, not timed out
  REQUIRE(late.value);
  CHECK(late.value->error == coretry::http::pool_error::too_late);
  CHECK(late.value->reached == coretry::http::stage::waiting_for_connection);
  CHECK(results[2]->reason == stop_reason::succeeded);
  CHECK(results[2]->value->reused_connection);
  // The late one never reached the server.
  std::vector<std::string> targets;
  for (const auto& logged : server->log()) targets.push_back(logged.target);
  CHECK(targets == std::vector<std::string>{"/status/200?delay=100", "/status/202?delay=100"});
  CHECK(h.client.stats().waiting == 0);
}
