// The asynchronous layer, driven on virtual time: every time and count exact.

#include "test_support.hpp"
#include "test_operations.hpp"

#include <policies.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <array>
#include <atomic>

using namespace coretry_tests;
using coretry::stop_reason;
using coretry::wait_source;

namespace {


coretry::retry_options idempotent_with(coretry::random_source& random) {
  coretry::retry_options o;
  o.safety = coretry::repeat_safety::idempotent;
  o.random = &random;
  return o;
}

/// Runs one retrying operation to completion on virtual time; returns its
/// outcome and the virtual time at which the caller's handler ran.
template <class Factory, class Classifier>
std::pair<coretry::outcome<int>, coretry::duration> run_retry(const coretry::policy& p,
                                                              const coretry::retry_options& o, Factory factory,
                                                              Classifier classify) {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  std::optional<coretry::outcome<int>> result;
  coretry::duration completed_at{};
  int handler_calls = 0;
  coretry::async_retry<manual_timer>(io.get_executor(), p, o, factory, classify,
                                     [&](std::exception_ptr e, coretry::outcome<int> r) {
                                       REQUIRE_FALSE(e);
                                       ++handler_calls;
                                       completed_at = runner.elapsed();
                                       result = std::move(r);
                                     });
  runner.run();
  REQUIRE(handler_calls == 1);
  return {std::move(*result), completed_at};
}

/// What most cases start from: an io_context run on virtual time, the
/// default policy and random draws with nothing scripted.
struct virtual_time {
  asio::io_context io;
  coretry::testing::manual_runner runner{io};
  coretry::policy p;
  coretry::testing::scripted_random draws{};
};

} // namespace

TEST_CASE("seed: worked example finishes at 890 ms") {
  coretry::policy p; // the book-detail read: 3 / 1000 / 250 / 100 / 50, windows 100 then 200
  coretry::testing::scripted_random draws{0.4, 0.7};
  fake_dependency dependency{{{10s}, {10s}, {210ms}}};
  auto [result, at] = run_retry(p, idempotent_with(draws), dependency.factory(), status_classifier{});

  CHECK(result.reason == stop_reason::succeeded);
  CHECK(result.attempts == 3);
  CHECK(result.value == 200);
  CHECK(at == ms(890));
  CHECK(result.elapsed == ms(890));
  REQUIRE(result.records.size() == 3);
  CHECK(result.records[0].start == ms(0));
  CHECK(result.records[0].end == ms(250));
  CHECK(result.records[0].error == coretry::attempt_error::timed_out);
  CHECK(result.records[1].wait_before == ms(40));
  CHECK(result.records[1].wait_from == wait_source::local);
  CHECK(result.records[1].start == ms(290));
  CHECK(result.records[1].end == ms(540));
  CHECK(result.records[2].wait_before == ms(140));
  CHECK(result.records[2].start == ms(680));
  CHECK(result.records[2].allowance == ms(250));
  CHECK(result.records[2].end == ms(890));
  CHECK(result.total_backoff == ms(180));
  // The timed-out attempts were cancelled at their deadlines, not abandoned.
  CHECK(dependency.cancelled_at == std::vector<coretry::duration>{ms(250), ms(540)});
}

TEST_CASE("seed: retry-after beyond the deadline stops at once") {
  coretry::policy p;
  coretry::testing::scripted_random draws{0.5, 0.5};
  fake_dependency dependency{{{100ms, {}, 503}, {10ms}}};
  auto [result, at] = run_retry(p, idempotent_with(draws), dependency.factory(), status_classifier{1s});

  CHECK(result.reason == stop_reason::server_delay_too_long);
  CHECK(at == ms(100));
  CHECK(result.attempts == 1);
  CHECK(dependency.calls == 1);
  CHECK(result.total_backoff == coretry::duration::zero());
  CHECK(result.value == 503); // the last response is kept for the caller
}

TEST_CASE("server delay is a minimum: never shortened, spread added on top") {
  coretry::policy p;
  p.overall_deadline = 10s;
  p.server_delay_spread = 100ms;
  // draws: local backoff (0.5 of 100 ms), then the spread (0.25 of 99.999999 ms, plus 1 ns).
  coretry::testing::scripted_random draws{0.5, 0.25};
  fake_dependency dependency{{{10ms, {}, 503}, {10ms}}};
  auto [result, at] = run_retry(p, idempotent_with(draws), dependency.factory(), status_classifier{1s});

  CHECK(result.reason == stop_reason::succeeded);
  REQUIRE(result.records.size() == 2);
  const coretry::duration spread = 1ns + coretry::duration(std::llround(0.25L * (ms(100).count() - 1)));
  CHECK(result.records[1].wait_before == 1s + spread);
  CHECK(result.records[1].wait_from == wait_source::server);
  CHECK(at == ms(10) + 1s + spread + ms(10));
}

TEST_CASE("seed: no sleep after the final attempt") {
  coretry::policy p;
  p.max_attempts = 2;
  p.backoff.jitter = coretry::jitter_kind::none;
  coretry::testing::scripted_random draws{};
  fake_dependency dependency{{{10ms, asio::error::connection_reset}}};
  auto [result, at] = run_retry(p, idempotent_with(draws), dependency.factory(), status_classifier{});

  CHECK(result.reason == stop_reason::attempts_exhausted);
  CHECK(result.attempts == 2);
  CHECK(dependency.calls == 2);
  // 10 ms attempt, 100 ms wait, 10 ms attempt, then straight to the caller.
  CHECK(at == ms(120));
  CHECK(result.total_backoff == ms(100));
  CHECK(result.last_error == asio::error::connection_reset);
}

TEST_CASE("seed: no attempt starts with less than the minimum allowance") {
  coretry::policy p;
  p.max_attempts = 10;
  p.backoff.jitter = coretry::jitter_kind::none;
  p.backoff.multiplier = 1.0; // every window 100 ms
  coretry::testing::scripted_random draws{};
  fake_dependency dependency{{{150ms, asio::error::connection_reset}}};
  auto [result, at] = run_retry(p, idempotent_with(draws), dependency.factory(), status_classifier{});

  // Attempts at 0, 250, 500, 750; the fourth's allowance is what remains
  // (1000 - 750 - 50 = 200 ms). At 900 only 50 ms would remain: stop, no sleep.
  CHECK(result.reason == stop_reason::deadline_exhausted);
  CHECK(at == ms(900));
  REQUIRE(result.records.size() == 4);
  CHECK(result.records[3].start == ms(750));
  CHECK(result.records[3].allowance == ms(200));
  for (const auto& record : result.records) CHECK(record.allowance >= p.min_attempt_allowance);
  CHECK(result.total_backoff == ms(300));
}

TEST_CASE("attempt deadline cancels the operation, it does not race it") {
  // An operation that needs 30 ms to wind down after it is cancelled: the
  // attempt must end when the operation has really finished, not at 250 ms.
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  std::vector<std::pair<coretry::duration, asio::cancellation_type>> seen;
  std::deque<manual_timer> timers;
  auto slow_to_cancel = [&](context) {
    return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code, int)>(
        [&](auto handler) {
          manual_timer& work = timers.emplace_back(io.get_executor());
          manual_timer& wind_down = timers.emplace_back(io.get_executor());
          auto slot = asio::get_associated_cancellation_slot(handler);
          work.expires_after(10s);
          slot.assign([&](asio::cancellation_type type) {
            seen.emplace_back(runner.elapsed(), type);
            work.cancel();
          });
          auto shared = std::make_shared<decltype(handler)>(std::move(handler));
          work.async_wait([&, shared](boost::system::error_code) {
            wind_down.expires_after(30ms);
            wind_down.async_wait([shared](boost::system::error_code) {
              auto ex = asio::get_associated_executor(*shared);
              asio::dispatch(ex, asio::append(std::move(*shared), asio::error::operation_aborted, 0));
            });
          });
        },
        asio::deferred);
  };
  coretry::policy p;
  p.max_attempts = 1;
  coretry::testing::scripted_random draws{};
  std::optional<coretry::outcome<int>> result;
  coretry::duration at{};
  coretry::async_retry<manual_timer>(io.get_executor(), p, idempotent_with(draws), slow_to_cancel,
                                     [&](std::exception_ptr, coretry::outcome<int> r) {
                                       at = runner.elapsed();
                                       result = std::move(r);
                                     });
  runner.run();
  REQUIRE(seen.size() >= 1);
  CHECK(seen[0].first == ms(250));
  // Repeated every 10 ms while the operation winds down, always terminal.
  for (std::size_t i = 0; i < seen.size(); ++i) {
    CHECK(seen[i].first == ms(250 + 10 * static_cast<int>(i)));
    CHECK(seen[i].second == asio::cancellation_type::terminal);
  }
  CHECK(seen.back().first <= ms(280));
  REQUIRE(result);
  CHECK(result->reason == stop_reason::attempts_exhausted);
  CHECK(result->records[0].error == coretry::attempt_error::timed_out);
  CHECK(result->records[0].end == ms(280));
  CHECK(at == ms(280));
}

namespace {

/// An operation that misses the first `missed` cancellation signals, as a
/// composed operation does when a signal arrives between two of its steps
/// (Beast's HTTP read in Boost 1.81 starts its next read without looking).
auto deaf_to_first_signals(asio::io_context& io, std::deque<manual_timer>& timers, int missed,
                           std::vector<coretry::duration>& heard, coretry::testing::manual_runner& runner) {
  return [&io, &timers, missed, &heard, &runner](context) {
    return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code, int)>(
        [&io, &timers, missed, &heard, &runner](auto handler) {
          manual_timer& work = timers.emplace_back(io.get_executor());
          work.expires_after(10s);
          auto signals = std::make_shared<int>(0);
          asio::get_associated_cancellation_slot(handler).assign([&work, &heard, &runner, signals, missed](
                                                                      asio::cancellation_type) {
            if ((*signals)++ < missed) return; // lost between two steps
            heard.push_back(runner.elapsed());
            work.cancel();
          });
          work.async_wait([h = std::move(handler)](boost::system::error_code ec) mutable {
            auto ex = asio::get_associated_executor(h);
            asio::dispatch(ex, asio::append(std::move(h), ec, 0));
          });
        },
        asio::deferred);
  };
}

} // namespace

namespace {

/// One attempt (no retries) of an operation that misses its first
/// `missed` cancellation signals, on virtual time.
struct missed_cancellation {
  missed_cancellation(int missed, coretry::duration repeat) : missed(missed) {
    policy.max_attempts = 1;
    options.cancellation_repeat = repeat;
  }
  auto operation() { return deaf_to_first_signals(io, timers, missed, heard, runner); }

  asio::io_context io;
  coretry::testing::manual_runner runner{io};
  std::deque<manual_timer> timers;
  std::vector<coretry::duration> heard; ///< when the operation finally heard a signal
  int missed;
  coretry::policy policy;
  coretry::testing::scripted_random draws{};
  coretry::retry_options options = idempotent_with(draws);
};

} // namespace

TEST_CASE("a cancellation an operation missed is repeated until the operation ends") {
  missed_cancellation t(2, 7ms);
  std::optional<coretry::outcome<int>> result;
  coretry::duration at{};
  coretry::async_retry<manual_timer>(t.io.get_executor(), t.policy, t.options, t.operation(),
                                     [&](std::exception_ptr, coretry::outcome<int> r) {
                                       at = t.runner.elapsed();
                                       result = std::move(r);
                                     });
  t.runner.run();
  // Sent at 250 and 257 (both missed), heard at 264.
  REQUIRE(t.heard.size() == 1);
  CHECK(t.heard[0] == ms(264));
  REQUIRE(result);
  CHECK(result->records[0].error == coretry::attempt_error::timed_out);
  CHECK(at == ms(264));
}

TEST_CASE("without repetition, a missed cancellation leaves the attempt hanging") {
  // What the repetition guards against: the deadline fired once, was missed,
  // and nothing else would ever end the attempt.
  missed_cancellation t(1, coretry::duration::zero());
  t.policy.overall_deadline = coretry::duration::max();
  bool completed = false;
  coretry::async_retry<manual_timer>(t.io.get_executor(), t.policy, t.options, t.operation(),
                                     [&](std::exception_ptr, coretry::outcome<int>) { completed = true; });
  t.runner.run_for(5s);
  CHECK_FALSE(completed);
  CHECK(t.heard.empty());
  t.runner.run(); // the operation's own 10 s work ends it at last
  CHECK(completed);
}

TEST_CASE("a caller's cancellation is repeated too, until the attempt ends") {
  missed_cancellation t(1, 5ms);
  asio::cancellation_signal cancel;
  std::optional<coretry::outcome<int>> result;
  coretry::duration at{};
  coretry::async_retry<manual_timer>(t.io.get_executor(), t.policy, t.options, t.operation(),
                                     asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr,
                                                                                     coretry::outcome<int> r) {
                                       at = t.runner.elapsed();
                                       result = std::move(r);
                                     }));
  manual_timer later(t.io.get_executor());
  later.expires_after(40ms);
  later.async_wait([&](boost::system::error_code) { cancel.emit(asio::cancellation_type::terminal); });
  t.runner.run();
  REQUIRE(t.heard.size() == 1);
  CHECK(t.heard[0] == ms(45));
  REQUIRE(result);
  CHECK(result->reason == stop_reason::cancelled);
  CHECK(at == ms(45));
}

TEST_CASE("cancellation during backoff completes promptly") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  coretry::policy p;
  p.backoff.jitter = coretry::jitter_kind::none;
  coretry::testing::scripted_random draws{};
  fake_dependency dependency{{{10ms, asio::error::connection_reset}}};
  asio::cancellation_signal cancel;
  std::optional<coretry::outcome<int>> result;
  coretry::duration at{};
  coretry::async_retry<manual_timer>(io.get_executor(), p, idempotent_with(draws), dependency.factory(),
                                     status_classifier{},
                                     asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr, auto r) {
                                       at = runner.elapsed();
                                       result = std::move(r);
                                     }));
  runner.run_until(manual_clock::time_point(ms(50))); // asleep between 10 and 110 ms
  CHECK_FALSE(result);
  cancel.emit(asio::cancellation_type::terminal);
  runner.run();
  REQUIRE(result);
  CHECK(result->reason == stop_reason::cancelled);
  CHECK(at == ms(50));
  CHECK(result->attempts == 1);
  CHECK(dependency.calls == 1);
}

TEST_CASE_FIXTURE(virtual_time, "partial cancellation is honoured too") {
  fake_dependency dependency{{{10s}}};
  asio::cancellation_signal cancel;
  std::optional<coretry::outcome<int>> result;
  coretry::async_retry<manual_timer>(io.get_executor(), p, idempotent_with(draws), dependency.factory(),
                                     status_classifier{},
                                     asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr, auto r) {
                                       result = std::move(r);
                                     }));
  runner.run_until(manual_clock::time_point(ms(20)));
  cancel.emit(asio::cancellation_type::partial);
  runner.run();
  REQUIRE(result);
  CHECK(result->reason == stop_reason::cancelled);
  CHECK(dependency.cancelled_at == std::vector<coretry::duration>{ms(20)});
}

TEST_CASE("cancellation during an attempt reaches the operation") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  std::vector<asio::cancellation_type> seen;
  std::deque<manual_timer> timers;
  // A deferred timer wait whose slot we watch: the attempt's own I/O.
  auto watched = [&](context) {
    return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code)>(
        [&](auto handler) {
          manual_timer& work = timers.emplace_back(io.get_executor());
          work.expires_after(10s);
          auto slot = asio::get_associated_cancellation_slot(handler);
          asio::cancellation_signal* forward = new asio::cancellation_signal;
          slot.assign([&, forward](asio::cancellation_type type) {
            seen.push_back(type);
            forward->emit(type);
          });
          work.async_wait(asio::bind_cancellation_slot(
              forward->slot(), [forward, h = std::move(handler)](boost::system::error_code ec) mutable {
                delete forward;
                auto ex = asio::get_associated_executor(h);
                asio::dispatch(ex, asio::append(std::move(h), ec));
              }));
        },
        asio::deferred);
  };
  coretry::policy p;
  coretry::testing::scripted_random draws{};
  asio::cancellation_signal cancel;
  std::optional<coretry::outcome<std::monostate>> result;
  coretry::duration at{};
  coretry::async_retry<manual_timer>(io.get_executor(), p, idempotent_with(draws), watched,
                                     asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr, auto r) {
                                       at = runner.elapsed();
                                       result = std::move(r);
                                     }));
  runner.run_until(manual_clock::time_point(ms(100)));
  cancel.emit(asio::cancellation_type::partial);
  runner.run();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == asio::cancellation_type::terminal); // any caller cancel is terminal for the attempt
  REQUIRE(result);
  CHECK(result->reason == stop_reason::cancelled);
  CHECK(at == ms(100));
  CHECK(result->attempts == 1);
  CHECK(result->records[0].classified.category == "cancelled");
}

TEST_CASE("unknown outcome is not retried") {
  coretry::policy p;
  coretry::testing::scripted_random draws{};
  coretry::retry_options unsafe;
  unsafe.random = &draws; // safety stays repeat_safety::unsafe
  SUBCASE("a timeout after sending stops as outcome unknown") {
    fake_dependency dependency{{{10s}}};
    auto [result, at] = run_retry(p, unsafe, dependency.factory(), status_classifier{});
    CHECK(result.reason == stop_reason::outcome_unknown);
    CHECK(result.attempts == 1);
    CHECK(at == ms(250));
  }
  SUBCASE("a failure that provably never reached the peer is retried") {
    coretry::testing::scripted_random more{0.5};
    unsafe.random = &more;
    fake_dependency dependency{{{1ms, asio::error::connection_refused}, {10ms}}};
    auto [result, at] = run_retry(p, unsafe, dependency.factory(), status_classifier{});
    CHECK(result.reason == stop_reason::succeeded);
    CHECK(result.attempts == 2);
    CHECK(at == ms(1 + 50 + 10));
  }
  SUBCASE("a definite transient answer to an unsafe request is a rejection") {
    fake_dependency dependency{{{10ms, {}, 503}}};
    auto [result, at] = run_retry(p, unsafe, dependency.factory(), status_classifier{});
    CHECK(result.reason == stop_reason::rejected);
    CHECK(result.attempts == 1);
  }
}

TEST_CASE("a known rejection stops at once") {
  coretry::policy p;
  coretry::testing::scripted_random draws{};
  fake_dependency dependency{{{5ms, {}, 404}}};
  auto [result, at] = run_retry(p, idempotent_with(draws), dependency.factory(), status_classifier{});
  CHECK(result.reason == stop_reason::rejected);
  CHECK(result.value == 404);
  CHECK(at == ms(5));
}

TEST_CASE_FIXTURE(virtual_time, "exceptions from the attempt propagate") {
  auto options = idempotent_with(draws);
  bool caught = false;
  int attempts_started = 0;
  // Run inside each subcase: the lambdas below live only as long as it does.
  auto run_and_check = [&] {
    runner.run();
    CHECK(caught);
    CHECK(attempts_started == 1); // never retried
  };
  SUBCASE("thrown inside an awaitable attempt, seen by the awaiting coroutine") {
    auto buggy = [&](context) -> asio::awaitable<int> {
      ++attempts_started;
      throw std::logic_error("bug in the attempt");
      co_return 0;
    };
    asio::co_spawn(io,
                   [&]() -> asio::awaitable<void> {
                     try {
                       co_await coretry::async_retry<manual_timer>(io.get_executor(), p, options, buggy,
                                                                   asio::use_awaitable);
                     } catch (const std::logic_error& e) {
                       caught = std::string(e.what()) == "bug in the attempt";
                     }
                   },
                   asio::detached);
    run_and_check();
  }
  SUBCASE("thrown by the factory") {
    auto buggy = [&](context) -> asio::awaitable<int> {
      ++attempts_started;
      throw std::logic_error("bug in the attempt");
    };
    coretry::async_retry<manual_timer>(io.get_executor(), p, options, buggy,
                                       [&](std::exception_ptr e, coretry::outcome<int> r) {
                                         caught = e != nullptr && r.attempts == 1;
                                       });
    run_and_check();
  }
  SUBCASE("thrown by the classifier") {
    fake_dependency dependency{{{1ms}}};
    coretry::async_retry<manual_timer>(
        io.get_executor(), p, options,
        [&](context) {
          ++attempts_started;
          return dependency.call();
        },
        [](const boost::system::error_code&, int) -> coretry::verdict { throw std::logic_error("bad classifier"); },
        [&](std::exception_ptr e, coretry::outcome<int>) { caught = e != nullptr; });
    run_and_check();
  }
}

TEST_CASE("seed: three layers of three attempts make 27 calls") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  coretry::policy p;
  p.overall_deadline = coretry::duration::max(); // count attempts, not time
  p.attempt_limit = 1h; // an outer attempt must outlast the inner layer's retries
  p.backoff.jitter = coretry::jitter_kind::none;
  coretry::testing::scripted_random draws{};
  auto options = idempotent_with(draws);
  fake_dependency pricing{{{1ms, asio::error::connection_reset}}};
  auto gateway = [&](context) {
    return coretry::async_retry<manual_timer>(io.get_executor(), p, options, pricing.factory(), asio::deferred);
  };
  auto sdk = [&](context) {
    return coretry::async_retry<manual_timer>(io.get_executor(), p, options, gateway, asio::deferred);
  };
  std::optional<coretry::outcome<coretry::outcome<coretry::outcome<int>>>> result;
  coretry::async_retry<manual_timer>(io.get_executor(), p, options, sdk,
                                     [&](std::exception_ptr e, auto r) {
                                       REQUIRE_FALSE(e);
                                       result = std::move(r);
                                     });
  runner.run();
  CHECK(pricing.calls == 27);
  REQUIRE(result);
  CHECK(result->reason == stop_reason::attempts_exhausted);
  CHECK(result->attempts == 3);
  REQUIRE(result->value);
  CHECK(result->value->reason == stop_reason::attempts_exhausted);
}

TEST_CASE("budget stops retries across operations, without sleeping for a refused one") {
  coretry::policy p;
  p.max_attempts = 5;
  coretry::testing::scripted_random draws{0.5, 0.5, 0.5, 0.5, 0.5, 0.5};
  coretry::token_bucket_budget budget({.capacity = 2, .tokens_per_initial_request = 0.1});
  auto options = idempotent_with(draws);
  options.budget = &budget;
  fake_dependency dependency{{{1ms, asio::error::connection_reset}}};
  auto [result, at] = run_retry(p, options, dependency.factory(), status_classifier{});
  CHECK(result.reason == stop_reason::budget_exhausted);
  CHECK(result.attempts == 3); // the first, then the two tokens
  CHECK(dependency.calls == 3);
  // Attempts of 1 ms at 0, 51 and 152 ms (waits of half the 100 and 200 ms
  // windows); the empty bucket stops it when the third ends, with no third wait.
  CHECK(result.total_backoff == ms(150));
  CHECK(at == ms(153));
}

TEST_CASE("seed: budget admits at most 20 + N/10 retries") {
  for (int n : {1, 9, 10, 11, 25, 100, 250}) {
    CAPTURE(n);
    asio::io_context io;
    coretry::testing::manual_runner runner(io);
    coretry::policy p;
    p.max_attempts = 1000;
    p.overall_deadline = coretry::duration::max();
    p.backoff.jitter = coretry::jitter_kind::none;
    p.backoff.initial_window = 1ms;
    p.backoff.max_window = 1ms;
    coretry::token_bucket_budget budget; // capacity 20, starts full, +0.1 per initial request
    coretry::retry_options options;
    options.safety = coretry::repeat_safety::idempotent;
    options.budget = &budget;
    fake_dependency dependency{{{1ms, asio::error::connection_reset}}};
    int retries = 0;
    // Operations one after another, every attempt failing.
    for (int i = 0; i < n; ++i) {
      coretry::async_retry<manual_timer>(io.get_executor(), p, options, dependency.factory(), status_classifier{},
                                         [&](std::exception_ptr, coretry::outcome<int> r) {
                                           CHECK(r.reason == stop_reason::budget_exhausted);
                                           retries += static_cast<int>(r.attempts) - 1;
                                         });
      runner.run();
    }
    CHECK(retries <= 20 + n / 10);
    // The first operation's deposit overflows the full bucket: exactly 20 + (n - 1) / 10.
    CHECK(retries == 20 + (n - 1) / 10);
    CHECK(dependency.calls == n + retries);
  }
}

TEST_CASE("completion token: use_awaitable") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  coretry::policy p;
  coretry::testing::scripted_random draws{0.5};
  fake_dependency dependency{{{300ms}, {20ms, {}, 201}}};
  std::optional<coretry::outcome<int>> result;
  asio::co_spawn(io,
                 [&]() -> asio::awaitable<void> {
                   result = co_await coretry::async_retry<manual_timer>(
                       io.get_executor(), p, idempotent_with(draws), dependency.factory(), asio::use_awaitable);
                 },
                 asio::detached);
  runner.run();
  REQUIRE(result);
  CHECK(result->get() == 201);
  CHECK(result->elapsed == ms(250 + 50 + 20));
}

TEST_CASE_FIXTURE(virtual_time, "completion token: deferred") {
  fake_dependency dependency{{{20ms}}};
  auto op = coretry::async_retry<manual_timer>(io.get_executor(), p, idempotent_with(draws), dependency.factory(),
                                               asio::deferred);
  CHECK(dependency.calls == 0); // nothing starts until the deferred operation is launched
  std::optional<coretry::outcome<int>> result;
  std::move(op)([&](std::exception_ptr, coretry::outcome<int> r) { result = std::move(r); });
  runner.run();
  REQUIRE(result);
  CHECK(result->succeeded());
  CHECK(dependency.calls == 1);
}

TEST_CASE_FIXTURE(virtual_time, "completion token: use_future") {
  fake_dependency dependency{{{5ms, {}, 404}}};
  auto future = coretry::async_retry<manual_timer>(io.get_executor(), p, idempotent_with(draws),
                                                   dependency.factory(), status_classifier{}, asio::use_future);
  runner.run();
  coretry::outcome<int> result = future.get();
  CHECK(result.reason == stop_reason::rejected);
  CHECK(result.error() == stop_reason::rejected);
  CHECK_THROWS_AS(result.get(), boost::system::system_error);
}

TEST_CASE_FIXTURE(virtual_time, "completion token: callback, and no completion inside the initiating call") {
  fake_dependency dependency{{{0ms}}};
  bool called = false;
  coretry::async_retry<manual_timer>(io.get_executor(), p, idempotent_with(draws), dependency.factory(),
                                     [&](std::exception_ptr, coretry::outcome<int>) { called = true; });
  CHECK_FALSE(called);
  runner.run();
  CHECK(called);
}

TEST_CASE_FIXTURE(virtual_time, "an attempt that completes inside its own start is still heard from the executor") {
  int calls = 0;
  auto at_once = [&](context) {
    ++calls;
    return deferred_attempt([](auto handler) { std::move(handler)(boost::system::error_code{}, 200); });
  };
  int completions = 0;
  coretry::async_retry<manual_timer>(io.get_executor(), p, idempotent_with(draws), at_once, status_classifier{},
                                     [&](std::exception_ptr e, coretry::outcome<int> r) {
                                       CHECK_FALSE(e);
                                       CHECK(r.value == 200);
                                       ++completions;
                                     });
  CHECK(completions == 0);
  runner.run();
  CHECK(completions == 1);
  CHECK(calls == 1);
  CHECK(runner.elapsed() == coretry::duration::zero());
}

TEST_CASE_FIXTURE(virtual_time, "an operation whose start throws is reported once, never inside the initiating call") {
  int calls = 0;
  auto throws_on_start = [&](context) {
    ++calls;
    return deferred_attempt([](auto) { throw std::logic_error("cannot start"); });
  };
  int completions = 0;
  coretry::async_retry<manual_timer>(io.get_executor(), p, idempotent_with(draws), throws_on_start,
                                     status_classifier{}, [&](std::exception_ptr e, coretry::outcome<int> r) {
                                       ++completions;
                                       REQUIRE(e);
                                       CHECK_THROWS_WITH_AS(std::rethrow_exception(e), "cannot start",
                                                            std::logic_error);
                                       CHECK(r.attempts == 1);
                                     });
  CHECK(completions == 0);
  runner.run();
  CHECK(completions == 1);
  CHECK(calls == 1); // a programming error is not retried
}

TEST_CASE("no attempt limit under no deadline: the attempt's deadline saturates, it does not wrap") {
  coretry::policy p;
  p.overall_deadline = coretry::duration::max();
  p.attempt_limit = coretry::duration::max();
  coretry::testing::scripted_random draws{};
  fake_dependency dependency{{{1h}}};
  auto [result, at] = run_retry(p, idempotent_with(draws), dependency.factory(), status_classifier{});
  CHECK(result.reason == stop_reason::succeeded);
  CHECK(result.attempts == 1);
  CHECK(at == 1h);
  REQUIRE(result.records.size() == 1);
  CHECK(result.records[0].allowance == coretry::duration::max());
}

TEST_CASE("an invalid policy is refused before anything starts, naming the problem") {
  asio::io_context io;
  coretry::policy p;
  p.max_attempts = 0;
  fake_dependency dependency{{{0ms}}};
  CHECK_THROWS_WITH_AS(coretry::async_retry<manual_timer>(io.get_executor(), p, dependency.factory(),
                                                          [](std::exception_ptr, coretry::outcome<int>) {}),
                       doctest::Contains("max_attempts"), std::invalid_argument);
  CHECK(dependency.calls == 0);
}

TEST_CASE("a negative cancellation_repeat is refused before anything starts, by name") {
  asio::io_context io;
  coretry::retry_options options;
  options.cancellation_repeat = -1ms;
  fake_dependency dependency{{{0ms}}};
  CHECK_THROWS_WITH_AS(coretry::async_retry<manual_timer>(io.get_executor(), coretry::policy{}, options,
                                                          dependency.factory(), status_classifier{},
                                                          [](std::exception_ptr, coretry::outcome<int>) {}),
                       doctest::Contains("cancellation_repeat"), std::invalid_argument);
  CHECK(dependency.calls == 0);
}

TEST_CASE("observer and counters see every event") {
  coretry::policy p;
  coretry::testing::scripted_random draws{0.4, 0.7};
  coretry::retry_counters counters;
  auto options = idempotent_with(draws);
  options.observer = &counters;
  options.operation = "/books/{id}";
  fake_dependency dependency{{{10s}, {10s}, {210ms}}};
  run_retry(p, options, dependency.factory(), status_classifier{});
  fake_dependency fine{{{5ms}}};
  run_retry(p, options, fine.factory(), status_classifier{});
  const auto s = counters.read();
  CHECK(s.operations == 2);
  CHECK(s.attempts == 4);
  CHECK(s.initial_successes == 1);
  CHECK(s.final_successes == 2);
  CHECK(s.total_backoff == ms(180));
  CHECK(s.attempts_per_operation[0] == 1);
  CHECK(s.attempts_per_operation[2] == 1);
  CHECK(s.stops[static_cast<int>(stop_reason::succeeded)] == 2);
}

TEST_CASE("a single-threaded io_context needs no strand, a multi-threaded one does") {
  using coretry::detail::is_serial_executor;
  asio::io_context one(1);
  asio::io_context unlocked(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE);
  asio::io_context many(4);
  asio::io_context unknown; // the default hint promises nothing
  CHECK(is_serial_executor(one.get_executor()));
  CHECK(is_serial_executor(asio::any_io_executor(one.get_executor())));
  CHECK(is_serial_executor(unlocked.get_executor()));
  CHECK_FALSE(is_serial_executor(many.get_executor()));
  CHECK_FALSE(is_serial_executor(asio::any_io_executor(many.get_executor())));
  CHECK_FALSE(is_serial_executor(unknown.get_executor()));
  CHECK(is_serial_executor(asio::make_strand(many)));
  CHECK(is_serial_executor(asio::any_io_executor(asio::make_strand(many))));
}

TEST_CASE("async_retry: the caller's slot after the end, with the handler on the operation's strand or elsewhere") {
  asio::io_context io;
  asio::io_context other;
  auto answers = [](const auto&) {
    return deferred_attempt([](auto handler) { std::move(handler)(boost::system::error_code{}, 200); });
  };
  asio::cancellation_signal cancel;
  int ran = 0;
  SUBCASE("on a strand of the I/O context: the operation's own, so the slot is cleared") {
    auto strand = asio::make_strand(io);
    coretry::async_retry<asio::steady_timer>(
        io.get_executor(), coretry::policy{}, idempotent(), answers, status_classifier{},
        asio::bind_cancellation_slot(cancel.slot(), asio::bind_executor(strand, [&](std::exception_ptr, auto) { ++ran; })));
    io.run();
    CHECK(ran == 1);
    CHECK_FALSE(cancel.slot().has_handler());
  }
  SUBCASE("on a strand of another io_context: the handler left in the slot is detached and does nothing") {
    auto strand = asio::make_strand(other);
    coretry::async_retry<asio::steady_timer>(
        io.get_executor(), coretry::policy{}, idempotent(), answers, status_classifier{},
        asio::bind_cancellation_slot(cancel.slot(), asio::bind_executor(strand, [&](std::exception_ptr, auto) { ++ran; })));
    io.run();
    other.run();
    CHECK(ran == 1);
    cancel.emit(asio::cancellation_type::terminal); // reaches nobody: nothing is posted
    io.restart();
    CHECK(io.poll() == 0);
  }
}

TEST_CASE_FIXTURE(virtual_time, "a result larger than 64 KiB is carried whole, with hedging configured") {
  // The operation's block holds the result: the parts after it must still be
  // found (their offsets from the block's start grow past 16 bits).
  using big = std::array<unsigned char, 70000>;
  p.hedging.max_hedges = 1;
  p.hedging.delay = 1s;
  int calls = 0;
  auto factory = [&](const auto&) {
    return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code, big)>(
        [&](auto handler) {
          ++calls;
          big value{};
          value.front() = 7;
          value.back() = 9;
          auto ex = asio::get_associated_executor(handler);
          asio::post(ex, asio::append(std::move(handler), boost::system::error_code(), value));
        },
        asio::deferred);
  };
  std::optional<coretry::outcome<big>> result;
  coretry::async_retry<manual_timer>(io.get_executor(), p, idempotent_with(draws), factory,
                                     [&](std::exception_ptr e, coretry::outcome<big> r) {
                                       REQUIRE_FALSE(e);
                                       result = std::move(r);
                                     });
  runner.run();
  REQUIRE(result);
  REQUIRE(result->succeeded());
  CHECK(result->get().front() == 7);
  CHECK(result->get().back() == 9);
  CHECK(calls == 1);
}
