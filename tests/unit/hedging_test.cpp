// Hedging (policy::hedging), driven on virtual time: every time and count exact.

#include "test_support.hpp"

#include <coretry/prometheus.hpp>

#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace coretry_tests;
using coretry::attempt_kind;
using coretry::stop_reason;

namespace {

const boost::system::error_code reset = asio::error::connection_reset; // transient

/// The book-detail policy (3 attempts, 1000 ms, 250 ms per attempt, 100 ms
/// minimum, 50 ms reserve) with `hedges` hedges after `delay`.
coretry::policy hedged(unsigned hedges = 1, coretry::duration delay = ms(50)) {
  coretry::policy p;
  p.hedging.max_hedges = hedges;
  p.hedging.delay = delay;
  return p;
}

/// A gate that admits or denies every hedge and retry, and counts what it is told.
struct counting_gate final : coretry::retry_gate {
  bool admit = true;
  int successes = 0, failures = 0, asks = 0;
  void record(coretry::attempt_status result, coretry::duration) noexcept override {
    if (result == coretry::attempt_status::success) ++successes;
    else ++failures;
  }
  coretry::gate_decision ask(coretry::duration, coretry::duration, const coretry::gate_decision*) noexcept override {
    ++asks;
    return admit ? coretry::gate_decision::admit() : coretry::gate_decision{coretry::gate_decision::action::deny};
  }
};

/// Emits the caller's cancellation when the observer hears of a hedge sent:
/// after the hedge is launched, before its attempt starts.
struct cancel_on_hedge final : coretry::retry_observer {
  asio::cancellation_signal* signal = nullptr;
  void hedge(const coretry::hedge_event& e) noexcept override {
    if (e.result == coretry::hedge_result::sent) signal->emit(asio::cancellation_type::terminal);
  }
};

struct hedged_run {
  coretry::outcome<int> result;
  coretry::duration completed_at;
  coretry::retry_counters::snapshot counts;
};

/// Runs one hedged operation to completion on virtual time.
hedged_run run_hedged(const coretry::policy& p, fake_dependency& dependency, coretry::retry_options o = {},
                      status_classifier classify = {}, asio::cancellation_signal* cancel = nullptr) {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  coretry::retry_counters counters;
  if (!o.observer) o.observer = &counters;
  o.safety = coretry::repeat_safety::idempotent;
  coretry::testing::scripted_random draws{0.5, 0.5, 0.5};
  o.random = &draws;
  std::optional<coretry::outcome<int>> result;
  coretry::duration completed_at{};
  int handler_calls = 0;
  auto handler = [&](std::exception_ptr e, coretry::outcome<int> r) {
    REQUIRE_FALSE(e);
    ++handler_calls;
    completed_at = runner.elapsed();
    result = std::move(r);
  };
  if (cancel)
    coretry::async_retry<manual_timer>(io.get_executor(), p, o, dependency.factory(), classify,
                                       asio::bind_cancellation_slot(cancel->slot(), handler));
  else
    coretry::async_retry<manual_timer>(io.get_executor(), p, o, dependency.factory(), classify, handler);
  runner.run();
  REQUIRE(handler_calls == 1);
  return {std::move(*result), completed_at, counters.read()};
}

/// An allocator that notes the size of every block it hands out.
template <class T>
struct sizing_allocator {
  using value_type = T;
  explicit sizing_allocator(std::vector<std::size_t>* noted) noexcept : sizes(noted) {}
  template <class U>
  sizing_allocator(const sizing_allocator<U>& other) noexcept : sizes(other.sizes) {}
  T* allocate(std::size_t n) {
    sizes->push_back(n * sizeof(T));
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept { std::allocator<T>().deallocate(p, n); }
  template <class U>
  bool operator==(const sizing_allocator<U>& other) const noexcept {
    return sizes == other.sizes;
  }
  std::vector<std::size_t>* sizes;
};

/// The size of the block an operation under `p` and `o` lives in: the first
/// its handler's allocator hands out. The operation succeeds at once.
std::size_t operation_block(const coretry::policy& p, coretry::retry_options o = {}) {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  o.safety = coretry::repeat_safety::idempotent;
  fake_dependency dependency{{{10ms}}};
  std::vector<std::size_t> sizes;
  int handler_calls = 0;
  coretry::async_retry<manual_timer>(io.get_executor(), p, o, dependency.factory(), status_classifier{},
                                     asio::bind_allocator(sizing_allocator<void>(&sizes),
                                                          [&](std::exception_ptr e, coretry::outcome<int> r) {
                                                            CHECK_FALSE(e);
                                                            CHECK(r.reason == stop_reason::succeeded);
                                                            ++handler_calls;
                                                          }));
  runner.run();
  CHECK(handler_calls == 1);
  REQUIRE_FALSE(sizes.empty());
  return sizes.front();
}

} // namespace

TEST_CASE("hedging: an operation whose policy sends no hedge carries none of hedging's state") {
  const std::size_t plain = operation_block(coretry::policy{});
  // The hedges' lanes (a cancellation signal each) and the hedging rules.
  const std::size_t hedging_state =
      coretry::policy::max_hedges_cap * sizeof(asio::cancellation_signal) + sizeof(coretry::hedging_policy);
  CHECK(operation_block(hedged(1)) >= plain + hedging_state);
  CHECK(operation_block(hedged(coretry::policy::max_hedges_cap)) == operation_block(hedged(1)));
  // An observed limit carries its rule, not hedging's lanes.
  coretry::policy observed;
  observed.observed = coretry::observed_limit{};
  coretry::latency_tracker tracker;
  coretry::retry_options with_tracker;
  with_tracker.tracker = &tracker;
  const std::size_t observing = operation_block(observed, with_tracker);
  CHECK(observing >= plain + sizeof(coretry::observed_limit));
  CHECK(operation_block(hedged(1)) >=
        observing + coretry::policy::max_hedges_cap * sizeof(asio::cancellation_signal));
  // A concurrency limit's place in its queue, only with a limit.
  coretry::concurrency_limit limit;
  coretry::retry_options limited;
  limited.limit = &limit;
  CHECK(operation_block(coretry::policy{}, limited) >= plain + sizeof(coretry::permit_waiter));
}

TEST_CASE("hedging: a hedge sent after the delay wins over a slow first attempt, which is cancelled") {
  fake_dependency dependency{{{1s}, {10ms}}};
  auto [result, at, counts] = run_hedged(hedged(), dependency);

  CHECK(result.reason == stop_reason::succeeded);
  CHECK(at == ms(60));
  CHECK(result.attempts == 2);
  CHECK(result.winner == 2);
  CHECK(dependency.started_at == std::vector<coretry::duration>{ms(0), ms(50)});
  CHECK(dependency.cancelled_at == std::vector<coretry::duration>{ms(60)});
  REQUIRE(result.records.size() == 2);
  CHECK(result.records[0].kind == attempt_kind::first);
  CHECK(result.records[0].superseded);
  CHECK(result.records[0].end == ms(60));
  CHECK(result.records[1].kind == attempt_kind::hedge);
  CHECK(result.records[1].start == ms(50));
  CHECK(result.records[1].allowance == ms(250));
  CHECK(result.records[1].end == ms(60));
  CHECK_FALSE(result.records[1].superseded);
  CHECK(counts.hedges_sent == 1);
  CHECK(counts.hedges_won == 1);
}

TEST_CASE("hedging: an attempt that ends before the delay sends no hedge") {
  fake_dependency dependency{{{30ms}}};
  auto [result, at, counts] = run_hedged(hedged(), dependency);
  CHECK(result.reason == stop_reason::succeeded);
  CHECK(at == ms(30));
  CHECK(dependency.calls == 1);
  CHECK(result.winner == 1);
  CHECK(counts.hedges_sent == 0);
}

TEST_CASE("hedging: the first attempt can still win, and the hedge is cancelled and the operation waits for it") {
  fake_dependency dependency{{{70ms}, {1s}}};
  auto [result, at, counts] = run_hedged(hedged(), dependency);
  CHECK(result.reason == stop_reason::succeeded);
  CHECK(result.winner == 1);
  CHECK(at == ms(70));
  CHECK(dependency.cancelled_at == std::vector<coretry::duration>{ms(70)});
  REQUIRE(result.records.size() == 2);
  CHECK(result.records[1].superseded);
  CHECK(counts.hedges_sent == 1);
  CHECK(counts.hedges_won == 0);
}

TEST_CASE("hedging: up to max_hedges in flight, each a delay after the latest start") {
  coretry::policy p = hedged(2, ms(40));
  p.max_attempts = 4;
  fake_dependency dependency{{{1s}, {1s}, {15ms}}};
  auto [result, at, counts] = run_hedged(p, dependency);
  CHECK(result.reason == stop_reason::succeeded);
  CHECK(dependency.started_at == std::vector<coretry::duration>{ms(0), ms(40), ms(80)});
  CHECK(at == ms(95));
  CHECK(result.winner == 3);
  CHECK(dependency.cancelled_at == std::vector<coretry::duration>{ms(95), ms(95)});
  CHECK(counts.hedges_sent == 2);
}

TEST_CASE("hedging: a transient failure while a hedge runs sends the next hedge at once") {
  fake_dependency dependency{{{80ms, reset}, {1s}, {20ms}}};
  auto [result, at, counts] = run_hedged(hedged(), dependency);
  CHECK(result.reason == stop_reason::succeeded);
  CHECK(dependency.started_at == std::vector<coretry::duration>{ms(0), ms(50), ms(80)});
  CHECK(at == ms(100));
  CHECK(result.winner == 3);
  REQUIRE(result.records.size() == 3);
  CHECK(result.records[0].classified.status == coretry::attempt_status::transient);
  CHECK(result.records[2].kind == attempt_kind::hedge);
  CHECK(result.records[2].wait_before == coretry::duration::zero());
  CHECK(dependency.cancelled_at == std::vector<coretry::duration>{ms(100)});
}

TEST_CASE("hedging: a permanent failure stops everything") {
  fake_dependency dependency{{{1s}, {20ms, {}, 404}}};
  auto [result, at, counts] = run_hedged(hedged(), dependency);
  CHECK(result.reason == stop_reason::rejected);
  CHECK(at == ms(70));
  CHECK(result.value == 404);
  CHECK(result.winner == 0);
  CHECK(dependency.calls == 2);
  CHECK(dependency.cancelled_at == std::vector<coretry::duration>{ms(70)});
}

TEST_CASE("hedging: max_attempts counts the hedges") {
  coretry::policy p = hedged(2, ms(50));
  p.max_attempts = 2;
  fake_dependency dependency{{{1s}}};
  auto [result, at, counts] = run_hedged(p, dependency);
  // A hedge at 50 ms, none at 100 ms (two attempts made); both time out.
  CHECK(dependency.started_at == std::vector<coretry::duration>{ms(0), ms(50)});
  CHECK(result.reason == stop_reason::attempts_exhausted);
  CHECK(at == ms(300));
  CHECK(result.attempts == 2);
  CHECK(counts.hedges_sent == 1);
}

TEST_CASE("hedging: the overall deadline covers the hedges and the minimum allowance holds") {
  SUBCASE("a hedge gets what is left of the deadline less the reserve") {
    coretry::policy p = hedged(1, ms(100));
    p.overall_deadline = ms(350);
    fake_dependency dependency{{{1s}}};
    auto [result, at, counts] = run_hedged(p, dependency);
    REQUIRE(result.records.size() == 2);
    CHECK(result.records[0].allowance == ms(250));
    CHECK(result.records[1].start == ms(100));
    CHECK(result.records[1].allowance == ms(200)); // 350 - 100 - 50
    CHECK(at == ms(300));
    CHECK(result.reason == stop_reason::deadline_exhausted);
  }
  SUBCASE("no hedge with less than the minimum allowance left") {
    coretry::policy p = hedged(1, ms(180));
    p.overall_deadline = ms(300);
    fake_dependency dependency{{{220ms}}};
    auto [result, at, counts] = run_hedged(p, dependency);
    CHECK(dependency.calls == 1); // at 180 ms only 70 ms would be left
    CHECK(result.reason == stop_reason::succeeded);
    CHECK(at == ms(220));
    CHECK(counts.hedges_sent == 0);
  }
}

TEST_CASE("hedging: a server's delay stops new hedges until that instant") {
  coretry::policy p = hedged(1, ms(50));
  fake_dependency dependency{{{1s}, {10ms, {}, 503}, {10ms}}};
  auto [result, at, counts] = run_hedged(p, dependency, {}, status_classifier{ms(100)});
  // The hedge fails at 60 ms asking for 100 ms: the next goes at 160 ms, not at once.
  CHECK(dependency.started_at == std::vector<coretry::duration>{ms(0), ms(50), ms(160)});
  CHECK(result.reason == stop_reason::succeeded);
  CHECK(result.winner == 3);
  CHECK(at == ms(170));
  CHECK(dependency.cancelled_at == std::vector<coretry::duration>{ms(170)});
}

TEST_CASE("hedging: a hedge the budget cannot pay for is simply not sent") {
  coretry::token_bucket_budget budget({.capacity = 1.0, .tokens_per_initial_request = 0.1});
  REQUIRE(budget.try_acquire_retry()); // emptied by others
  coretry::retry_options o;
  o.budget = &budget;
  fake_dependency dependency{{{200ms}}};
  auto [result, at, counts] = run_hedged(hedged(), dependency, o);
  CHECK(result.reason == stop_reason::succeeded);
  CHECK(at == ms(200));
  CHECK(dependency.calls == 1);
  CHECK(counts.hedges_sent == 0);
  CHECK(counts.hedges_refused_budget == 1);
  CHECK(budget.tokens() == doctest::Approx(0.1));
}

TEST_CASE("hedging: each hedge takes a budget token") {
  coretry::token_bucket_budget budget({.capacity = 5.0, .tokens_per_initial_request = 0.1});
  coretry::retry_options o;
  o.budget = &budget;
  fake_dependency dependency{{{1s}, {10ms}}};
  auto [result, at, counts] = run_hedged(hedged(), dependency, o);
  CHECK(result.winner == 2);
  CHECK(budget.tokens() == doctest::Approx(4.0)); // full at 5, the first deposits nothing more, the hedge takes one
}

TEST_CASE("hedging: a hedge the gate does not admit is simply not sent, and losers are not told to the gate") {
  counting_gate gate;
  coretry::retry_options o;
  o.gate = &gate;
  SUBCASE("refused") {
    gate.admit = false;
    fake_dependency dependency{{{200ms}}};
    auto [result, at, counts] = run_hedged(hedged(), dependency, o);
    CHECK(result.reason == stop_reason::succeeded);
    CHECK(at == ms(200));
    CHECK(dependency.calls == 1);
    CHECK(gate.asks == 1);
    CHECK(counts.hedges_refused_gate == 1);
  }
  SUBCASE("admitted: only the winner is recorded") {
    fake_dependency dependency{{{1s}, {10ms}}};
    auto [result, at, counts] = run_hedged(hedged(), dependency, o);
    CHECK(result.winner == 2);
    CHECK(gate.asks == 1);
    CHECK(gate.successes == 1);
    CHECK(gate.failures == 0); // the cancelled first attempt counts for nothing
  }
}

TEST_CASE("hedging: winner and loser finishing in one step") {
  counting_gate gate;
  coretry::retry_options o;
  o.gate = &gate;
  fake_dependency dependency{{{60ms}, {10ms}}};
  auto [result, at, counts] = run_hedged(hedged(), dependency, o);
  CHECK(result.reason == stop_reason::succeeded);
  CHECK(at == ms(60));
  REQUIRE(result.records.size() == 2);
  // Whichever came first won; the other is a loser, whatever it returned.
  CHECK(result.records[result.winner == 1 ? 1 : 0].superseded);
  CHECK_FALSE(result.records[result.winner - 1].superseded);
  CHECK(gate.successes == 1);
  CHECK(gate.failures == 0);
  CHECK(result.value == 200);
}

TEST_CASE("hedging: the caller's cancellation between a hedge's launch and its start") {
  asio::cancellation_signal cancel;
  cancel_on_hedge observer;
  observer.signal = &cancel;
  coretry::retry_options o;
  o.observer = &observer;
  fake_dependency dependency{{{1s}}};
  auto [result, at, counts] = run_hedged(hedged(), dependency, o, {}, &cancel);
  CHECK(result.reason == stop_reason::cancelled);
  // Both attempts are ended at once; nothing else is launched.
  CHECK(dependency.calls == 2);
  CHECK(dependency.cancelled_at == std::vector<coretry::duration>{ms(50), ms(50)});
  CHECK(at == ms(50));
}

TEST_CASE("hedging: the caller's cancellation stops the hedges still to come") {
  asio::cancellation_signal cancel;
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  coretry::retry_options o;
  o.safety = coretry::repeat_safety::idempotent;
  fake_dependency dependency{{{1s}}};
  int calls = 0;
  coretry::duration completed_at{};
  std::optional<coretry::outcome<int>> result;
  coretry::async_retry<manual_timer>(io.get_executor(), hedged(1, ms(50)), o, dependency.factory(),
                                     status_classifier{},
                                     asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr,
                                                                                     coretry::outcome<int> r) {
                                       ++calls;
                                       completed_at = runner.elapsed();
                                       result = std::move(r);
                                     }));
  runner.run_until(manual_clock::time_point(ms(30)));
  cancel.emit(asio::cancellation_type::terminal);
  runner.run();
  CHECK(calls == 1);
  CHECK(result->reason == stop_reason::cancelled);
  CHECK(dependency.calls == 1);
  CHECK(completed_at == ms(30));
}

TEST_CASE("hedging: a retry after every attempt failed, and hedges after it") {
  coretry::policy p = hedged(1, ms(50));
  p.max_attempts = 4;
  // The first fails at 10 ms alone: a retry after its backoff (0.5 of 100 ms).
  fake_dependency dependency{{{10ms, reset}, {1s}, {10ms}}};
  auto [result, at, counts] = run_hedged(p, dependency);
  REQUIRE(result.records.size() == 3);
  CHECK(result.records[1].kind == attempt_kind::retry);
  CHECK(result.records[1].start == ms(60));
  CHECK(result.records[2].kind == attempt_kind::hedge);
  CHECK(result.records[2].start == ms(110));
  CHECK(at == ms(120));
  CHECK(result.winner == 3);
}

TEST_CASE("hedging: only for operations safe to repeat, and the policy is checked") {
  asio::io_context io;
  fake_dependency dependency{{{1ms}}};
  coretry::retry_options unsafe;
  CHECK_THROWS_AS(coretry::async_retry<manual_timer>(io.get_executor(), hedged(), unsafe, dependency.factory(),
                                                     status_classifier{}, [](std::exception_ptr, auto) {}),
                  std::invalid_argument);
  coretry::policy p = hedged(coretry::policy::max_hedges_cap + 1);
  REQUIRE(p.validate());
  CHECK(p.validate()->find("max_hedges") != std::string::npos);
  p = hedged(1, coretry::duration::zero());
  REQUIRE(p.validate());
  CHECK(p.validate()->find("delay") != std::string::npos);
  CHECK_FALSE(hedged(coretry::policy::max_hedges_cap).validate());
  CHECK(dependency.calls == 0);
}

TEST_CASE("hedging: the percentile delay rule, exactly") {
  using coretry::latency_snapshot;
  using coretry::observed_hedge_delay;
  coretry::hedging_policy h;
  h.max_hedges = 1;
  h.delay_percentile = 95.0;
  const latency_snapshot warm{ms(20), 100};
  const latency_snapshot cold{ms(20), 99};
  CHECK_FALSE(observed_hedge_delay(h, nullptr, ms(250)));
  CHECK_FALSE(observed_hedge_delay(h, &cold, ms(250)));
  CHECK(observed_hedge_delay(h, &warm, ms(250)) == ms(20));
  // At least 1 ms, at most the attempt's limit (and 1 ms when that is shorter).
  const latency_snapshot fast{std::chrono::microseconds(300), 100};
  CHECK(observed_hedge_delay(h, &fast, ms(250)) == ms(1));
  CHECK(observed_hedge_delay(h, &warm, ms(15)) == ms(15));
  CHECK(observed_hedge_delay(h, &warm, std::chrono::microseconds(10)) == ms(1));
  h.min_successes = 99;
  CHECK(observed_hedge_delay(h, &cold, ms(250)) == ms(20));
}

namespace {

/// A tracker (snapshots computed on every read) holding `successes`
/// successful attempts of `latency`, recorded at time zero.
std::unique_ptr<coretry::latency_tracker> tracker_with(int successes, coretry::duration latency) {
  coretry::latency_tracker::options o;
  o.refresh_interval = coretry::duration::zero();
  auto tracker = std::make_unique<coretry::latency_tracker>(o);
  for (int i = 0; i < successes; ++i)
    tracker->record(coretry::latency_result::success, latency, coretry::duration::zero());
  return tracker;
}

coretry::policy hedged_at_percentile(double percentile) {
  coretry::policy p = hedged();
  p.hedging.delay_percentile = percentile;
  return p;
}

} // namespace

TEST_CASE("hedging: a percentile delay, read as its bucket's upper edge, once the tracker holds 100 successes") {
  const coretry::duration edge = coretry::latency_tracker::upper_edge(ms(20));
  REQUIRE(edge > ms(20)); // 20 ms is not a bucket edge: the delay is read above it
  auto tracker = tracker_with(100, ms(20));
  coretry::retry_options o;
  o.tracker = tracker.get();
  fake_dependency dependency{{{1s}, {10ms}}};
  auto [result, at, counts] = run_hedged(hedged_at_percentile(95.0), dependency, o);
  CHECK(result.reason == stop_reason::succeeded);
  CHECK(dependency.started_at == std::vector<coretry::duration>{ms(0), edge});
  CHECK(at == edge + ms(10));
  CHECK(result.winner == 2);
  CHECK(counts.hedges_sent == 1);
}

TEST_CASE("hedging: no hedge on a percentile delay before the tracker holds 100 successes") {
  auto tracker = tracker_with(99, ms(20));
  coretry::retry_options o;
  o.tracker = tracker.get();
  fake_dependency dependency{{{1s}, {10ms}}};
  auto [result, at, counts] = run_hedged(hedged_at_percentile(95.0), dependency, o);
  // The first attempt runs out its 250 ms limit; the retry follows its backoff.
  CHECK(result.reason == stop_reason::succeeded);
  REQUIRE(dependency.started_at.size() == 2);
  CHECK(dependency.started_at[0] == ms(0));
  CHECK(dependency.started_at[1] > ms(250));
  CHECK(result.records[1].kind == attempt_kind::retry);
  CHECK(counts.hedges_sent == 0);
}

TEST_CASE("hedging: a percentile delay needs a tracker, and a bad percentile is refused by name") {
  asio::io_context io;
  fake_dependency dependency{{{1ms}}};
  coretry::retry_options o;
  o.safety = coretry::repeat_safety::idempotent;
  CHECK_THROWS_WITH_AS(coretry::async_retry<manual_timer>(io.get_executor(), hedged_at_percentile(95.0), o,
                                                          dependency.factory(), status_classifier{},
                                                          [](std::exception_ptr, auto) {}),
                       doctest::Contains("retry_options::tracker"), std::invalid_argument);
  for (double bad : {0.0, -1.0, 100.5, std::numeric_limits<double>::quiet_NaN()}) {
    CAPTURE(bad);
    const auto problem = hedged_at_percentile(bad).validate();
    REQUIRE(problem);
    CHECK(problem->find("delay_percentile") != std::string::npos);
  }
  coretry::policy p = hedged_at_percentile(95.0);
  p.hedging.min_successes = 0;
  REQUIRE(p.validate());
  CHECK(p.validate()->find("min_successes") != std::string::npos);
  CHECK_FALSE(hedged_at_percentile(100.0).validate());
  CHECK(dependency.calls == 0);
}

TEST_CASE("hedging: counted by the observers, and losers are not failures") {
  coretry::prometheus_observer metrics({"operation"});
  coretry::retry_options o;
  o.observer = &metrics;
  fake_dependency dependency{{{1s}, {10ms}}};
  auto [result, at, counts] = run_hedged(hedged(), dependency, o);
  REQUIRE(result.winner == 2);
  const std::string text = metrics.text();
  CHECK(text.find("coretry_hedges_total{route=\"operation\",result=\"sent\"} 1\n") != std::string::npos);
  CHECK(text.find("coretry_hedges_total{route=\"operation\",result=\"won\"} 1\n") != std::string::npos);
  CHECK(text.find("coretry_hedges_total{route=\"operation\",result=\"refused_budget\"} 0\n") != std::string::npos);
  CHECK(text.find("coretry_hedge_delay_seconds{route=\"operation\"} 0.05\n") != std::string::npos);
  CHECK(text.find("superseded") == std::string::npos);
}
