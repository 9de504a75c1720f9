// manual_clock_test: unit-testing retry logic of your own on virtual time.
//
// The code under test is `inventory::async_reserve`, an application's own
// rule for reserving stock: up to 4 attempts, 100 ms each, equal jitter on
// windows from 100 ms, a 409 is final. It is written once, with the timer as
// a template parameter: production code uses the default steady_timer, the
// tests pass coretry::testing::manual_timer and drive the io_context with a
// manual_runner, which runs whatever is ready and then jumps virtual time to
// the next timer. Jitter draws come from scripted_random, so every wait, and
// so every attempt's start and end, is exact to the nanosecond: the tests
// below check them with ==, and a simulated second costs nothing.
//
// A doctest program: exits 0 when every case passes.

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <coretry/coretry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;

// ---- the application's code under test -------------------------------------

namespace inventory {

/// The stock service's answer to one reservation attempt: an HTTP-like status.
using reserve_call = std::function<asio::awaitable<int>(unsigned attempt)>;

inline coretry::policy reservation_policy() {
  coretry::policy p;
  p.max_attempts = 4;
  p.overall_deadline = 2s;
  p.attempt_limit = 100ms;
  p.min_attempt_allowance = 20ms;
  p.completion_reserve = 10ms;
  p.backoff.initial_window = 100ms;
  p.backoff.jitter = coretry::jitter_kind::equal; // half the window, plus up to half at random
  return p;
}

struct reservation_classifier {
  coretry::verdict operator()(const boost::system::error_code& ec, int status) const {
    if (ec) return coretry::classify_error(ec);
    if (status == 200) return coretry::verdict::success();
    if (status == 503) return coretry::verdict::transient("unavailable", coretry::delivery::answered);
    return coretry::verdict::permanent("refused"); // 409: out of stock; asking again changes nothing
  }
};

/// Reserves stock under the application's retry rule. Reservations carry an
/// idempotency key, so a timed-out attempt may be repeated.
template <class Timer = asio::steady_timer, class Executor, class Token>
auto async_reserve(const Executor& ex, reserve_call call, coretry::random_source* random, Token&& token) {
  coretry::retry_options options;
  options.safety = coretry::repeat_safety::idempotency_key;
  options.operation = "reserve";
  options.random = random;
  return coretry::async_retry<Timer>(
      ex, reservation_policy(), options,
      [call = std::move(call)](coretry::attempt_context<typename Timer::clock_type> attempt) {
        return call(attempt.number);
      },
      reservation_classifier{}, std::forward<Token>(token));
}

} // namespace inventory

// ---- its tests ---------------------------------------------------------------

namespace {

using coretry::testing::manual_timer;
using ms = std::chrono::milliseconds;

/// A scripted stock service on virtual time: attempt N takes `takes[N-1]` and
/// answers `statuses[N-1]` (the last entry repeats). Records when each call
/// started and when it was cancelled.
struct scripted_service {
  scripted_service(std::vector<int> answers, std::vector<coretry::duration> durations)
      : statuses(std::move(answers)), takes(std::move(durations)) {}

  std::vector<int> statuses;
  std::vector<coretry::duration> takes;
  std::vector<coretry::duration> started_at, cancelled_at;

  asio::awaitable<int> call(unsigned attempt) {
    const std::size_t i = std::min<std::size_t>(attempt - 1, statuses.size() - 1);
    manual_timer work(co_await asio::this_coro::executor);
    started_at.push_back(work.now().time_since_epoch());
    work.expires_after(takes.at(std::min(i, takes.size() - 1)));
    auto [ec] = co_await work.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) { // the attempt's deadline: terminal cancellation reached our wait
      cancelled_at.push_back(work.now().time_since_epoch());
      throw boost::system::system_error(ec);
    }
    co_return statuses[i];
  }
};

struct finished {
  coretry::outcome<int> outcome;
  coretry::duration at; // the virtual time the caller's handler ran
};

/// Runs one reservation to its end on virtual time.
finished reserve(scripted_service& service, coretry::random_source& draws) {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  std::optional<finished> result;
  inventory::async_reserve<manual_timer>(
      io.get_executor(), [&](unsigned attempt) { return service.call(attempt); }, &draws,
      [&](std::exception_ptr e, coretry::outcome<int> o) {
        REQUIRE_FALSE(e);
        result = finished{std::move(o), runner.elapsed()};
      });
  runner.run(); // throws coretry::testing::deadlock_error if the operation could never end
  REQUIRE(result);
  return std::move(*result);
}

} // namespace

TEST_CASE("two 503s, then a reservation: attempts at exactly 0, 80 and 310 ms") {
  scripted_service service{{503, 503, 200}, {30ms}};
  // Equal jitter: windows of 100 then 200 ms give waits of 50 + 0 x 50 and 100 + 1 x 100 ms.
  coretry::testing::scripted_random draws{0.0, 1.0};
  auto [o, at] = reserve(service, draws);

  CHECK(o.reason == coretry::stop_reason::succeeded);
  CHECK(o.value == 200);
  CHECK(service.started_at == std::vector<coretry::duration>{ms(0), ms(80), ms(310)});
  REQUIRE(o.records.size() == 3);
  CHECK(o.records[1].wait_before == ms(50));
  CHECK(o.records[2].wait_before == ms(200));
  CHECK(o.records[2].end == ms(340));
  CHECK(o.total_backoff == ms(250));
  CHECK(at == ms(340));
  CHECK(draws.draws_used() == 2);
}

TEST_CASE("a service that hangs is cut at 100 ms per attempt, four times") {
  scripted_service service{{200}, {10s}};
  coretry::testing::scripted_random draws{0.0, 0.0, 0.0};
  auto [o, at] = reserve(service, draws);

  CHECK(o.reason == coretry::stop_reason::attempts_exhausted);
  CHECK(o.attempts == 4);
  CHECK(o.last_error == coretry::attempt_error::timed_out);
  // Each attempt's wait was cancelled at its deadline, not left running.
  CHECK(service.started_at == std::vector<coretry::duration>{ms(0), ms(150), ms(350), ms(650)});
  CHECK(service.cancelled_at == std::vector<coretry::duration>{ms(100), ms(250), ms(450), ms(750)});
  CHECK(at == ms(750));
}

TEST_CASE("a 409 is final: one attempt, no wait") {
  scripted_service service{{409}, {30ms}};
  coretry::testing::scripted_random draws{};
  auto [o, at] = reserve(service, draws);

  CHECK(o.reason == coretry::stop_reason::rejected);
  CHECK(o.attempts == 1);
  CHECK(o.value == 409); // the last answer is handed over even when the operation failed
  CHECK(at == ms(30));
  CHECK(draws.draws_used() == 0);
}
