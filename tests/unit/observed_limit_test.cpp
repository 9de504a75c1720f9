// Attempt limits chosen from the dependency's observed latencies: the rule
// (observed_attempt_limit, pure) and the asynchronous layer that reads a
// shared latency_tracker and records every attempt into it, on virtual time.

#include "test_support.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <stdexcept>

using namespace coretry_tests;
using coretry::duration;
using coretry::latency_snapshot;
using coretry::latency_tracker;
using coretry::observed_limit;
using coretry::stop_reason;

namespace {

duration edge(duration d) { return latency_tracker::upper_edge(d); }

/// `attempts` attempts in 1000 ms with a 50 ms reserve and a 100 ms minimum
/// allowance, a fixed 10 ms backoff, limits observed at p99.9 x 1.5 in
/// [10 ms, remaining time], after 50 successes.
coretry::policy observed_policy(unsigned attempts) {
  coretry::policy p;
  p.max_attempts = attempts;
  p.backoff.jitter = coretry::jitter_kind::none;
  p.backoff.initial_window = 10ms;
  p.backoff.multiplier = 1.0;
  p.backoff.max_window = 10ms;
  p.server_delay_spread = duration::zero();
  p.observed = observed_limit{};
  return p;
}

/// A tracker of 10 s in 10 sub-windows whose snapshots are computed on
/// every read (the cache is latency_tracker_test's).
latency_tracker::options exact_tracker() {
  latency_tracker::options o;
  o.refresh_interval = duration::zero();
  return o;
}

/// Operations started one after the other on virtual time, sharing a tracker.
struct observed_run {
  asio::io_context io;
  coretry::testing::manual_runner runner{io};
  latency_tracker tracker;
  coretry::retry_options options;

  explicit observed_run(const latency_tracker::options& o = exact_tracker()) : tracker(o) {
    options.safety = coretry::repeat_safety::idempotent;
    options.tracker = &tracker;
  }

  /// Starts an operation now without running it; its outcome goes to `out`.
  void start(const coretry::policy& p, fake_dependency& dependency, std::optional<coretry::outcome<int>>& out) {
    coretry::async_retry<manual_timer>(io.get_executor(), p, options, dependency.factory(), status_classifier{},
                                       [&out](std::exception_ptr e, coretry::outcome<int> r) {
                                         REQUIRE_FALSE(e);
                                         out = std::move(r);
                                       });
  }

  /// Runs one operation to its end, from now.
  coretry::outcome<int> run(const coretry::policy& p, fake_dependency& dependency) {
    std::optional<coretry::outcome<int>> out;
    start(p, dependency, out);
    runner.run();
    REQUIRE(out);
    return std::move(*out);
  }
};

std::vector<step> repeated(std::size_t n, duration takes, int value = 200) {
  return std::vector<step>(n, step{takes, {}, value});
}

std::vector<step> operator+(std::vector<step> a, const std::vector<step>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

} // namespace

TEST_CASE("observed limit: the rule, exactly") {
  const observed_limit o; // p99.9 x 1.5 in [10 ms, max], after 50 successes
  latency_snapshot s;
  s.percentile = edge(100ms);
  s.successes = 49;
  CHECK(coretry::observed_attempt_limit(o, s) == duration::max()); // warm-up: the ceiling
  observed_limit capped = o;
  capped.ceiling = 800ms;
  CHECK(coretry::observed_attempt_limit(capped, s) == 800ms);
  s.successes = 50;
  // 1.5 x 100,663,295 ns, rounded up.
  CHECK(edge(100ms) == 100'663'295ns);
  CHECK(coretry::observed_attempt_limit(o, s) == 150'994'943ns);
  s.percentile = edge(5ms);
  CHECK(coretry::observed_attempt_limit(o, s) == 10ms); // 7.57 ms: the floor
  s.percentile = edge(300ms);
  CHECK(coretry::observed_attempt_limit(o, s) == 452'984'831ns);
  CHECK(coretry::observed_attempt_limit(capped, s) == 452'984'831ns);
  s.percentile = edge(600ms);
  CHECK(coretry::observed_attempt_limit(capped, s) == 800ms);
  // A censored majority: at least twice the longest limit timed out at.
  s.percentile = edge(5ms);
  s.censored_majority = true;
  s.longest_censored = edge(10ms);
  CHECK(edge(10ms) == 10'092'543ns);
  CHECK(coretry::observed_attempt_limit(o, s) == 20'185'086ns);
  s.longest_censored = edge(500ms);
  CHECK(coretry::observed_attempt_limit(capped, s) == 800ms);
  // ... even in the warm-up, the ceiling is the limit.
  s.successes = 3;
  s.longest_censored = edge(10ms);
  CHECK(coretry::observed_attempt_limit(capped, s) == 800ms);
  // Without a censored majority, the percentile alone.
  s.successes = 50;
  s.censored_majority = false;
  s.longest_censored = edge(500ms);
  CHECK(coretry::observed_attempt_limit(o, s) == 10ms);
}

TEST_CASE("observed limit: a bad observed form, or one without a tracker, is refused by name") {
  auto problem = [](auto change) {
    coretry::policy p = observed_policy(3);
    change(*p.observed);
    return p.validate().value_or("");
  };
  CHECK(problem([](observed_limit& o) { o.percentile = 0; }).find("percentile") != std::string::npos);
  CHECK(problem([](observed_limit& o) { o.percentile = 100.5; }).find("percentile") != std::string::npos);
  CHECK(problem([](observed_limit& o) { o.margin = 0.5; }).find("margin") != std::string::npos);
  CHECK(problem([](observed_limit& o) { o.margin = std::nan(""); }).find("margin") != std::string::npos);
  CHECK(problem([](observed_limit& o) { o.floor = 0ms; }).find("floor") != std::string::npos);
  CHECK(problem([](observed_limit& o) { o.ceiling = 5ms; }).find("ceiling") != std::string::npos);
  CHECK(problem([](observed_limit& o) { o.warm_up = 2'000'000; }).find("warm_up") != std::string::npos);
  CHECK_FALSE(observed_policy(3).validate());

  asio::io_context io;
  fake_dependency dependency{repeated(1, 5ms)};
  coretry::retry_options no_tracker;
  CHECK_THROWS_WITH_AS(coretry::async_retry<manual_timer>(io.get_executor(), observed_policy(3), no_tracker,
                                                          dependency.factory(), status_classifier{},
                                                          [](std::exception_ptr, coretry::outcome<int>) {}),
                       doctest::Contains("retry_options::tracker"), std::invalid_argument);
}

TEST_CASE("observed limit: the ceiling through the warm-up, then margin x p99.9 of the successes") {
  observed_run t;
  fake_dependency dependency{repeated(1, 100ms)};
  const coretry::policy p = observed_policy(1);
  for (int i = 0; i < 60; ++i) {
    CAPTURE(i);
    const duration start = t.runner.elapsed();
    CHECK(start == i * 100ms);
    const auto r = t.run(p, dependency);
    REQUIRE(r.reason == stop_reason::succeeded);
    // The first 50 see fewer than 50 successes: the remaining time less the reserve.
    CHECK(r.records[0].allowance == (i < 50 ? 950ms : 150'994'943ns));
  }
  CHECK(t.tracker.successes(t.runner.elapsed()) == 60);
}

TEST_CASE("observed limit: a dependency slower than the limit is learnt by doubling, then the limit shrinks") {
  observed_run t;
  // 60 calls of 5 ms, then 300 ms from the 61st call.
  fake_dependency dependency{repeated(60, 5ms) + repeated(1, 300ms)};
  const coretry::policy p = observed_policy(1);
  for (int i = 0; i < 60; ++i) REQUIRE(t.run(p, dependency).reason == stop_reason::succeeded);
  CHECK(t.runner.elapsed() == 300ms);

  // Learnt at 5 ms: limits of 10 ms (the floor), each a timeout. The 3% of
  // a healthy dependency never make a majority, but this is every call:
  // after 61 timeouts (61 of 121 attempts) the limit doubles from the
  // longest one timed out at, and again after each timeout, until an
  // attempt outlasts 300 ms.
  std::vector<duration> limits;
  duration expected = 10ms;
  for (int i = 0; i < 61; ++i) {
    const auto r = t.run(p, dependency);
    REQUIRE(r.reason == stop_reason::attempts_exhausted);
    REQUIRE(r.records[0].allowance == 10ms);
  }
  int doublings = 0;
  for (;;) {
    const auto r = t.run(p, dependency);
    expected = 2 * edge(expected);
    CAPTURE(doublings);
    CHECK(r.records[0].allowance == std::min<duration>(expected, 950ms));
    ++doublings;
    if (r.reason == stop_reason::succeeded) break;
    REQUIRE(doublings < 10);
  }
  // 20.2, 40.4, 80.7, 161.5 ms time out; 323.0 ms outlasts the 300 ms.
  CHECK(doublings == 5);
  CHECK(expected == 322'961'406ns);

  // From the first success on, 1.5 x p99.9 of the successes (the 300 ms
  // one) is above twice the longest timeout: the limit is 453 ms. The
  // slow calls go on until 900 ms into a second, so that the last second
  // of them holds at least 3 (see below).
  int slow = 0;
  while (slow < 6 || t.runner.elapsed() % 1s < 900ms) {
    const auto r = t.run(p, dependency);
    REQUIRE(r.reason == stop_reason::succeeded);
    REQUIRE(r.records[0].allowance == 452'984'831ns);
    ++slow;
  }

  // Recovery: 5 ms again. The 300 ms successes hold p99.9 until the last of
  // them leaves the window (its sub-window of 1 s, 10 s later): the last
  // second holds at least 3 of them, more than 0.1% of the fewer than 2,000
  // successes of 5 ms the window then holds.
  dependency.steps = repeated(1, 5ms);
  const duration last_slow_end = t.runner.elapsed();
  const duration gone = (last_slow_end / 1s + 10) * 1s;
  int before = 0, after = 0;
  while (t.runner.elapsed() < gone + 50ms) {
    const duration start = t.runner.elapsed();
    const auto r = t.run(p, dependency);
    REQUIRE(r.reason == stop_reason::succeeded);
    if (start < gone) {
      ++before;
      REQUIRE(r.records[0].allowance == 452'984'831ns);
    } else {
      ++after;
      REQUIRE(r.records[0].allowance == 10ms);
    }
  }
  CHECK(before > 1000);
  CHECK(after == 10);
}

TEST_CASE("observed limit: an attempt's limit is clamped to the remaining time less the reserve") {
  latency_tracker::options minute = exact_tracker();
  minute.window = 60s; // the 50 calls take 15 s
  observed_run t{minute};
  // 50 calls of 300 ms teach a limit of 453 ms; then a 503 after 300 ms, a
  // hang, and a call that would take 200 ms.
  fake_dependency dependency{repeated(50, 300ms) + std::vector<step>{{300ms, {}, 503}, {10s}, {200ms}}};
  for (int i = 0; i < 50; ++i) REQUIRE(t.run(observed_policy(1), dependency).reason == stop_reason::succeeded);
  const duration origin = t.runner.elapsed();
  const auto r = t.run(observed_policy(3), dependency);
  REQUIRE(r.records.size() == 3);
  // 0: 503 at 300 ms; 10 ms backoff; 310: the learnt limit fits (640 ms
  // left); it times out at 763 ms; 773: 177 ms are left: the limit is cut to them.
  CHECK(r.records[0].allowance == 452'984'831ns);
  CHECK(r.records[1].start == 310ms);
  CHECK(r.records[1].allowance == 452'984'831ns);
  CHECK(r.records[2].start == 310ms + 452'984'831ns + 10ms);
  CHECK(r.records[2].allowance == 1000ms - 50ms - r.records[2].start);
  CHECK(r.reason == stop_reason::attempts_exhausted);
  // The tracker saw one failure, two timeouts at their allowances, no success.
  const latency_snapshot s = t.tracker.compute(99.9, origin + 1s);
  CHECK(s.successes == 50);
  CHECK(s.longest_censored == edge(452'984'831ns));
}

TEST_CASE("observed limit: one tracker shared by concurrent operations") {
  observed_run t;
  fake_dependency dependency{repeated(1, 20ms)};
  const coretry::policy p = observed_policy(1);
  // 60 operations at once: none has seen a success, all get the ceiling.
  std::vector<std::optional<coretry::outcome<int>>> first(60), second(60);
  for (auto& out : first) t.start(p, dependency, out);
  t.runner.run();
  for (auto& out : first) {
    REQUIRE(out);
    CHECK(out->records[0].allowance == 950ms);
  }
  CHECK(t.runner.elapsed() == 20ms);
  // 60 more at once: each reads the 60 successes the others recorded.
  for (auto& out : second) t.start(p, dependency, out);
  t.runner.run();
  for (auto& out : second) {
    REQUIRE(out);
    CHECK(out->records[0].allowance == 30'277'631ns); // 1.5 x 20,185,087 ns, rounded up
    CHECK(out->reason == stop_reason::succeeded);
  }
  CHECK(edge(20ms) == 20'185'087ns);
  CHECK(t.tracker.successes(t.runner.elapsed()) == 120);
}

TEST_CASE("observed limit: an attempt the caller cancels is not recorded") {
  observed_run t;
  const duration now = t.runner.elapsed();
  for (int i = 0; i < 9; ++i) t.tracker.record(coretry::latency_result::timeout, 10ms, now);
  CHECK_FALSE(t.tracker.compute(99.9, now).censored_majority); // 9 attempts: fewer than 10
  fake_dependency dependency{repeated(1, 500ms)};
  asio::cancellation_signal cancel;
  std::optional<coretry::outcome<int>> out;
  coretry::async_retry<manual_timer>(t.io.get_executor(), observed_policy(3), t.options, dependency.factory(),
                                     status_classifier{},
                                     asio::bind_cancellation_slot(cancel.slot(), [&out](std::exception_ptr, coretry::outcome<int> r) {
                                       out = std::move(r);
                                     }));
  t.runner.run_for(100ms);
  cancel.emit(asio::cancellation_type::terminal);
  t.runner.run();
  REQUIRE(out);
  CHECK(out->reason == stop_reason::cancelled);
  // Counted as any attempt, it would make 10 attempts, 9 of them timeouts.
  CHECK_FALSE(t.tracker.compute(99.9, t.runner.elapsed()).censored_majority);
  CHECK(t.tracker.successes(t.runner.elapsed()) == 0);
}
