// The blame rules without sockets: what an attempt's end and a connect's
// failure say of the address they went to, and what the address health
// object does with those reports. Times are given, never read.

#include "address_health.hpp"

#include <coretry/http/client_error.hpp>
#include <coretry/stop_reason.hpp>

#include <boost/asio/error.hpp>
#include <boost/beast/http/error.hpp>

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <vector>

// Named, not unnamed: the suite is a unity build, in which the file-scope
// names of its sources share one translation unit.
namespace address_health_cases {

using namespace std::chrono_literals;
using coretry::attempt_status;
using coretry::http::exchange;
using coretry::http::detail::address_health;
using coretry::http::detail::blame;
using coretry::http::detail::connect_report;
using coretry::http::detail::name_and_port;
using endpoint = boost::asio::ip::tcp::endpoint;
using error_code = boost::system::error_code;
namespace asio = boost::asio;

const address_health::time_point start = address_health::time_point{} + 1000h;
const name_and_port billing{"billing", "443"};

endpoint at(const char* address) { return {asio::ip::make_address(address), 443}; }

/// An attempt that went to 127.0.0.2 over a new connection, answered with `status` (0: no answer).
exchange went(unsigned status, error_code transport = {}, bool reused = false) {
  exchange x;
  x.address = at("127.0.0.2");
  x.error = transport;
  x.reused_connection = reused;
  if (status != 0) {
    x.res.emplace();
    x.res->result(status);
  }
  return x;
}

blame judged(const exchange& x, attempt_status status = attempt_status::success, error_code ec = {},
             bool through_proxy = false) {
  return coretry::http::detail::attempt_blame(ec, x, status, through_proxy);
}

/// Two addresses of billing, ejection as the client's options have it, a 250 ms attempt delay.
struct two_addresses : address_health {
  two_addresses() : address_health(1h, coretry::http::outlier_ejection{}, 250ms) {
    pin(billing, {at("127.0.0.2"), at("127.0.0.3")});
  }
};

TEST_CASE("address health: an answer below 500 clears the address, a transient 5xx counts against it, a permanent "
          "5xx says nothing") {
  CHECK(judged(went(200)) == blame::success);
  CHECK(judged(went(404), attempt_status::permanent) == blame::success);
  CHECK(judged(went(429), attempt_status::transient) == blame::success);
  CHECK(judged(went(503), attempt_status::transient) == blame::failure);
  CHECK(judged(went(500), attempt_status::transient) == blame::failure);
  // 501 and 505 are not the address's doing (the classifier says permanent),
  // nor is a 5xx a classifier extension took as permanent.
  CHECK(judged(went(501), attempt_status::permanent) == blame::none);
  CHECK(judged(went(503), attempt_status::permanent) == blame::none);
}

TEST_CASE("address health: an attempt out of time or a new connection closed before an answer counts, a reused "
          "one closed, a refused answer or a cancellation does not") {
  CHECK(judged(went(0), attempt_status::transient, coretry::attempt_error::timed_out) == blame::failure);
  CHECK(judged(went(0, asio::error::eof), attempt_status::transient) == blame::failure);
  CHECK(judged(went(0, asio::error::connection_reset), attempt_status::transient) == blame::failure);
  CHECK(judged(went(0, boost::beast::http::error::end_of_stream), attempt_status::transient) == blame::failure);
  CHECK(judged(went(0, asio::error::timed_out), attempt_status::transient) == blame::failure); // the idle limit
  // A kept-alive connection closed under a request is its usual end.
  CHECK(judged(went(0, asio::error::eof, true), attempt_status::transient) == blame::none);
  CHECK(judged(went(0, asio::error::connection_reset, true), attempt_status::transient) == blame::none);
  CHECK(judged(went(0, coretry::http::response_error::line_too_long), attempt_status::permanent) == blame::none);
  CHECK(judged(went(0, boost::beast::http::error::header_limit), attempt_status::permanent) == blame::none);
  CHECK(judged(went(0, asio::error::operation_aborted), attempt_status::transient) == blame::none);
}

TEST_CASE("address health: through a proxy, or without an address, an attempt says nothing") {
  CHECK(judged(went(503), attempt_status::transient, {}, true) == blame::none);
  CHECK(judged(went(200), attempt_status::success, {}, true) == blame::none);
  CHECK(judged(went(0), attempt_status::transient, coretry::attempt_error::timed_out, true) == blame::none);
  exchange nowhere = went(0);
  nowhere.address.reset();
  CHECK(judged(nowhere, attempt_status::transient, coretry::attempt_error::timed_out) == blame::none);
}

TEST_CASE("address health: a refused, reset, unreachable or timed-out connect counts, this machine's failures and "
          "a cancellation do not") {
  using coretry::http::detail::connect_blame;
  for (const error_code ec : {error_code(asio::error::connection_refused), error_code(asio::error::connection_reset),
                              error_code(asio::error::connection_aborted), error_code(asio::error::host_unreachable),
                              error_code(asio::error::network_unreachable), error_code(asio::error::timed_out)})
    CHECK(connect_blame({.at = at("127.0.0.2"), .error = ec}, 250ms) == blame::failure);
  for (const error_code ec : {error_code(), error_code(asio::error::no_descriptors),
                              error_code(asio::error::no_buffer_space), error_code(asio::error::operation_aborted)})
    CHECK(connect_blame({.at = at("127.0.0.2"), .error = ec}, 250ms) == blame::none);
}

TEST_CASE("address health: a race's loser counts when it started first and the winner outran it by the attempt "
          "delay, exactly") {
  using coretry::http::detail::connect_blame;
  const auto loser = [](coretry::duration tried, coretry::duration winner_tried, bool outrun = true) {
    return connect_report{
        .at = at("127.0.0.2"), .error = {}, .outrun = outrun, .tried = tried, .winner_tried = winner_tried};
  };
  CHECK(connect_blame(loser(300ms, 50ms), 250ms) == blame::failure);
  CHECK(connect_blame(loser(300ms - 1ns, 50ms), 250ms) == blame::none);
  // Started after the winner: it had no chance.
  CHECK(connect_blame(loser(40ms, 50ms), 0ms) == blame::none);
  CHECK(connect_blame(loser(50ms, 50ms), 0ms) == blame::none);
  // Done before the race ended (its own failure, or cancelled): not outrun.
  CHECK(connect_blame(loser(2s, 50ms, false), 250ms) == blame::none);
}

TEST_CASE("address health: five reports against an address eject it, but permanent 5xx, proxied answers and a "
          "success between them do not") {
  two_addresses health;
  const auto report = [&](const exchange& x, attempt_status status, int times, bool through_proxy = false) {
    for (int i = 0; i < times; ++i)
      health.attempt_ended(billing, *x.address, through_proxy, {}, x, status, [] { return start; });
  };
  report(went(501), attempt_status::permanent, 5);
  report(went(503), attempt_status::transient, 5, true);
  CHECK(health.stats(start).ejected == 0);
  report(went(503), attempt_status::transient, 4);
  report(went(200), attempt_status::success, 1);
  report(went(503), attempt_status::transient, 4);
  CHECK(health.stats(start).ejected == 0);
  report(went(503), attempt_status::transient, 1);
  CHECK(health.stats(start).ejected == 1);
  CHECK(health.order(billing, {}, start) == std::vector<endpoint>{at("127.0.0.3"), at("127.0.0.2")});
  // The time is asked for only when a failure is recorded: an attempt that
  // went well reads no clock.
  int clock_reads = 0;
  const exchange fine = went(200);
  health.attempt_ended(billing, at("127.0.0.3"), false, {}, fine, attempt_status::success, [&] {
    ++clock_reads;
    return start;
  });
  CHECK(clock_reads == 0);
  CHECK_FALSE(health.suits(billing, at("127.0.0.2"), {}, start));
  CHECK(health.suits(billing, at("127.0.0.3"), {}, start));
}

TEST_CASE("address health: connect reports eject by the connect rule, and races are counted") {
  two_addresses health;
  for (int i = 0; i < 4; ++i) {
    health.connect_ended(billing, {.at = at("127.0.0.3"), .error = asio::error::connection_refused}, start);
    health.connect_ended(billing, {.at = at("127.0.0.3"), .error = asio::error::no_descriptors}, start);
    // Outrun by less than the client's 250 ms.
    health.connect_ended(billing, {.at = at("127.0.0.3"), .error = {}, .outrun = true, .tried = 200ms,
                                   .winner_tried = 10ms}, start);
  }
  CHECK(health.stats(start).ejected == 0);
  health.connect_ended(billing, {.at = at("127.0.0.3"), .error = {}, .outrun = true, .tried = 260ms,
                                 .winner_tried = 10ms}, start);
  CHECK(health.stats(start).ejected == 1);
  CHECK(health.order(billing, {}, start) == std::vector<endpoint>{at("127.0.0.2"), at("127.0.0.3")});
  health.race_started();
  health.race_started();
  CHECK(health.stats(start).connect_races == 2);
}

TEST_CASE("address health: a refused connect and an attempt without an answer teach the balancer, with "
          "ejection off") {
  coretry::http::outlier_ejection off;
  off.consecutive_failures = 0;
  address_health health(1h, off, 250ms);
  const endpoint a = at("127.0.0.2");
  const endpoint b = at("127.0.0.3");
  health.pin(billing, {a, b});
  // B refuses every connection; each request that picks it goes on to A
  // (the race's next address), which answers in 5 ms.
  int to_b = 0;
  for (int i = 0; i < 100; ++i) {
    const address_health::time_point now = start + i * 10ms;
    const auto picked = health.pick(billing, {}, now);
    REQUIRE(picked);
    if (*picked == b) {
      ++to_b;
      health.connect_ended(billing, {.at = b, .error = asio::error::connection_refused}, now);
    }
    REQUIRE(health.request_started(billing, a));
    health.request_ended(billing, a, 5ms, now + 5ms);
  }
  CHECK(to_b < 50);
  CHECK(health.stats(start + 1s).ejected == 0);

  // A cancelled attempt (the caller's, or a hedge that lost) says nothing;
  // one out of time without an answer makes A cost at least the 1 s
  // penalty.
  const address_health::time_point later = start + 2s;
  exchange unanswered;
  unanswered.address = a;
  const double before = health.cost(billing, a, later);
  CHECK(before < 5e6 + 1);
  health.attempt_ended(billing, a, false, asio::error::operation_aborted, unanswered, attempt_status::transient,
                       [&] { return later; });
  CHECK(health.cost(billing, a, later) == doctest::Approx(before));
  health.attempt_ended(billing, a, false, coretry::attempt_error::timed_out, unanswered, attempt_status::transient,
                       [&] { return later; });
  CHECK(health.cost(billing, a, later) >= 1e9);
}

TEST_CASE("address health: an operation's used addresses, the latest last, at most eight, and a retry prefers the "
          "others") {
  using coretry::http::detail::used_addresses;
  used_addresses used;
  std::array<endpoint, used_addresses::capacity> list;
  CHECK(used.copy(list) == 0);
  used.add(at("127.0.0.2"));
  used.add(at("127.0.0.3"));
  used.add(at("127.0.0.2")); // used again: now the latest
  REQUIRE(used.copy(list) == 2);
  CHECK(list[0] == at("127.0.0.3"));
  CHECK(list[1] == at("127.0.0.2"));
  for (int i = 10; i < 20; ++i) used.add({asio::ip::address_v4(0x7f000000u + static_cast<unsigned>(i)), 443});
  REQUIRE(used.copy(list) == used_addresses::capacity);
  CHECK(list.front() == endpoint(asio::ip::address_v4(0x7f00000cu), 443)); // the oldest two made room
  CHECK(list.back() == endpoint(asio::ip::address_v4(0x7f000013u), 443));

  two_addresses health;
  const std::array<endpoint, 1> tried{at("127.0.0.2")};
  CHECK(health.order(billing, tried, start) == std::vector<endpoint>{at("127.0.0.3"), at("127.0.0.2")});
  CHECK_FALSE(health.suits(billing, at("127.0.0.2"), tried, start));
  CHECK(health.suits(billing, at("127.0.0.3"), tried, start));
}

} // namespace address_health_cases
