// Phase timings of real attempts against the fault server on loopback: which
// phases each attempt reached, and the phase where a delay the server was
// told to make shows up. Durations are asserted only as bounds around such a
// delay.

#include <coretry/http/client.hpp>
#include <faults/fault_server.hpp>

#include <doctest/doctest.h>

#include "blocking_client.hpp"
#include "loopback_listener.hpp"
#include "phase_recorder.hpp"
#include "policies.hpp"
#include "server_thread.hpp"

#include <chrono>
#include <optional>

namespace beast_http = boost::beast::http;
using namespace std::chrono_literals;
using coretry::duration;
using coretry::phase;
using coretry::test::loopback_policy;
using coretry::test::server_thread;

namespace {

/// The time `x` spent in `p`, which it must have reached.
duration spent(const coretry::http::exchange& x, phase p) {
  REQUIRE(x.phases.reached(p));
  return *x.phases[p];
}

struct phased_client : coretry_tests::blocking_client {
  using blocking_client::blocking_client;

  coretry::http::request_options options(coretry::policy p = loopback_policy()) {
    coretry::http::request_options o;
    o.policy = p;
    o.route = "/phases";
    o.phases = &recorder;
    return o;
  }

  /// GETs `url` and checks what holds for every attempt: the observer was
  /// told of each one, once, with the route, and its phases add up to no
  /// more than the attempt's time as the engine measured it.
  coretry::http::result get(const std::string& url, const coretry::http::request_options& o) {
    recorder.attempts.clear();
    coretry::http::result r = send(beast_http::verb::get, url, o);
    CHECK_FALSE(recorder.failed);
    REQUIRE(recorder.attempts.size() == r.records.size());
    for (std::size_t i = 0; i < r.records.size(); ++i) {
      const auto& seen = recorder.attempts[i];
      CHECK(seen.route == "/phases");
      CHECK(seen.attempt == r.records[i].number);
      CHECK_FALSE(seen.phases.running());
      CHECK(seen.phases.total() <= r.records[i].end - r.records[i].start);
    }
    if (r.value) CHECK(r.value->phases.total() == recorder.attempts.back().phases.total());
    return r;
  }

  coretry_tests::phase_recorder recorder;
};

} // namespace

TEST_CASE("phases: a new connection to an IP address, then the same connection reused") {
  server_thread server;
  phased_client c;
  const auto first = c.get(server.url("/status/200"), c.options());
  const auto second = c.get(server.url("/status/200"), c.options());
  REQUIRE(first.succeeded());
  REQUIRE(second.succeeded());

  const auto& opened = first.value->phases;
  CHECK_FALSE(first.value->reused_connection);
  // The engine's records say the same (the connection label of the attempt histogram).
  CHECK(first.records.back().connection == coretry::connection_use::fresh);
  CHECK(second.records.back().connection == coretry::connection_use::reused);
  CHECK(opened.reached(phase::pool_wait));
  CHECK_FALSE(opened.reached(phase::lookup)); // an IP address is not looked up
  CHECK(opened.reached(phase::connect));
  CHECK_FALSE(opened.reached(phase::tls));    // plain http
  CHECK(opened.reached(phase::write));
  CHECK(opened.reached(phase::first_byte));
  CHECK(opened.reached(phase::read));
  CHECK(c.recorder.attempts[0].complete);

  const auto& reused = second.value->phases;
  CHECK(second.value->reused_connection);
  CHECK(c.recorder.attempts[0].reused_connection);
  CHECK(reused.reached(phase::pool_wait));
  CHECK_FALSE(reused.reached(phase::lookup));
  CHECK_FALSE(reused.reached(phase::connect));
  CHECK_FALSE(reused.reached(phase::tls));
  CHECK(reused.reached(phase::write));
  CHECK(reused.reached(phase::first_byte));
  CHECK(reused.reached(phase::read));
}

TEST_CASE("phases: a host name is looked up") {
  server_thread server;
  phased_client c;
  const auto r = c.get("http://localhost:" + std::to_string(server->port()) + "/status/200", c.options());
  REQUIRE(r.succeeded());
  CHECK(r.value->phases.reached(phase::lookup));
  CHECK(r.value->phases.reached(phase::connect));
}

TEST_CASE("phases: a server slow to answer shows in first_byte, a slow body in read") {
  server_thread server;
  phased_client c;
  const auto slow_start = c.get(server.url("/status/200?delay=150&body=abc"), c.options());
  REQUIRE(slow_start.succeeded());
  CHECK(spent(*slow_start.value, phase::first_byte) >= 150ms);
  CHECK(spent(*slow_start.value, phase::read) < 100ms);

  // The header at once, then five bytes of body 40 ms apart.
  const auto slow_body = c.get(server.url("/status/200?drip=5:40"), c.options());
  REQUIRE(slow_body.succeeded());
  CHECK(slow_body.value->res->body().size() == 5);
  CHECK(spent(*slow_body.value, phase::first_byte) < 100ms);
  CHECK(spent(*slow_body.value, phase::read) >= 160ms);
}

TEST_CASE("phases: waiting for the pool's only connection shows in pool_wait") {
  server_thread server;
  coretry::http::client_options one;
  one.max_connections_per_origin = 1;
  phased_client c(one);
  auto options = c.options();
  std::optional<coretry::http::result> slow, waiting;
  // The first request holds the only connection for 200 ms; the second,
  // started at the same time, waits for it.
  c.client.async_send(server.url("/status/200?delay=200"), coretry::http::request(beast_http::verb::get, "", 11),
                      options, [&](std::exception_ptr, coretry::http::result r) { slow = std::move(r); });
  c.client.async_send(server.url("/status/200"), coretry::http::request(beast_http::verb::get, "", 11), options,
                      [&](std::exception_ptr, coretry::http::result r) { waiting = std::move(r); });
  c.io.run();
  REQUIRE(slow);
  REQUIRE(waiting);
  REQUIRE(slow->succeeded());
  REQUIRE(waiting->succeeded());
  CHECK(spent(*slow->value, phase::pool_wait) < 100ms);
  CHECK(spent(*waiting->value, phase::pool_wait) >= 150ms);
  CHECK(waiting->value->reused_connection); // it got the first request's connection
  CHECK_FALSE(waiting->value->phases.reached(phase::connect));
}

TEST_CASE("phases: an attempt that timed out waiting for the answer has the phases it reached") {
  server_thread server;
  phased_client c;
  coretry::policy p = loopback_policy(1s, 150ms);
  p.max_attempts = 1;
  const auto r = c.get(server.url("/status/200?delay=1000"), c.options(p));
  REQUIRE(r.records.size() == 1);
  CHECK(r.records[0].error == coretry::attempt_error::timed_out);
  CHECK(r.records[0].connection == coretry::connection_use::fresh);
  const auto& phases = r.value->phases;
  CHECK(phases.reached(phase::connect));
  CHECK(phases.reached(phase::write));
  REQUIRE(phases.reached(phase::first_byte));
  CHECK_FALSE(phases.reached(phase::read));
  CHECK(spent(*r.value, phase::first_byte) >= 100ms); // the wait lasted until the deadline
  CHECK_FALSE(c.recorder.attempts[0].complete);
}

TEST_CASE("phases: a refused connection ends in connect") {
  const unsigned short port = coretry::test::loopback_listener().port(); // closed at once
  phased_client c;
  coretry::policy p = loopback_policy();
  p.max_attempts = 2;
  const auto r = c.get("http://127.0.0.1:" + std::to_string(port) + "/", c.options(p));
  CHECK_FALSE(r.succeeded());
  for (const auto& record : r.records) CHECK(record.connection == coretry::connection_use::none);
  for (const auto& seen : c.recorder.attempts) {
    CHECK(seen.phases.reached(phase::pool_wait));
    CHECK(seen.phases.reached(phase::connect));
    CHECK_FALSE(seen.phases.reached(phase::write));
    CHECK_FALSE(seen.phases.reached(phase::first_byte));
    CHECK_FALSE(seen.complete);
  }
}
