// The herd's simulation, run through the real coretry engine on virtual time:
// every assertion is about what that engine did to the dependency.

#include "herd/herd_sim.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

using namespace std::chrono_literals;
using herd::strategy;

namespace {

/// An outage small enough for a test, with a network without variance so
/// that every time is exact: each message takes 10 ms.
herd::outage_config exact_outage(strategy s, unsigned clients) {
  herd::outage_config c;
  c.clients = clients;
  c.retry = s;
  c.outage = 1s;
  c.capacity = 100;
  c.service_time = 10ms;
  c.max_attempts = 10;
  c.base = 100ms;
  c.cap = 2s;
  c.network = {10ms, 0ms};
  c.seed = 99;
  return c;
}

std::size_t bucket_of(herd::duration t) { return static_cast<std::size_t>(t / herd::bucket_width); }

double mean_calls(strategy s, unsigned clients, unsigned runs) {
  double sum = 0;
  for (unsigned run = 0; run < runs; ++run) {
    herd::contention_config c;
    c.clients = clients;
    c.retry = s;
    c.seed = herd::run_seed(2024, "contention", clients, run);
    sum += static_cast<double>(herd::run_contention(c).calls);
  }
  return sum / runs;
}

} // namespace

TEST_CASE("the same seed replays a run exactly and another seed does not") {
  herd::contention_config c;
  c.clients = 30;
  c.retry = strategy::full;
  c.seed = 12345;
  const auto a = herd::run_contention(c);
  const auto b = herd::run_contention(c);
  CHECK(a.calls == b.calls);
  CHECK(a.ended == b.ended);
  CHECK(a.attempts == b.attempts);
  CHECK(a.arrivals == b.arrivals);
  c.seed = 54321;
  const auto other = herd::run_contention(c);
  CHECK((other.ended != a.ended || other.calls != a.calls));

  herd::outage_config o;
  o.clients = 300;
  o.retry = strategy::decorrelated;
  o.seed = 7;
  const auto x = herd::run_outage(o);
  const auto y = herd::run_outage(o);
  CHECK(x.arrivals == y.arrivals);
  CHECK(x.ended == y.ended);
  CHECK(x.stops == y.stops);
}

TEST_CASE("studies are replayed from their seed") {
  herd::contention_study study;
  study.client_counts = {10, 20};
  study.runs = 2;
  study.seed = 77;
  std::size_t calls = 0;
  const auto first = herd::run_contention_study(study, [&](std::size_t done, std::size_t total, const std::string&) {
    ++calls;
    CHECK(done <= total);
  });
  CHECK(calls == 2 * 5 * 2 * 2);
  const auto second = herd::run_contention_study(study);
  REQUIRE(first.size() == second.size());
  for (std::size_t i = 0; i < first.size(); ++i) {
    CHECK(first[i].mean_calls == second[i].mean_calls);
    CHECK(first[i].mean_completion_ms == second[i].mean_completion_ms);
  }
}

TEST_CASE("without jitter the herd arrives in synchronized waves and full jitter spreads it") {
  constexpr unsigned n = 400;
  const auto waves = herd::run_outage(exact_outage(strategy::exponential, n));

  // Attempt k+1 arrives 10 ms (answer) + window + 10 ms (request) after
  // attempt k: windows 100, 200, 400 ms during the outage, 800 ms to the
  // first attempt after it. Every client is in every wave: N arrivals in
  // the same 10 ms, all at the same instant.
  for (herd::duration at : {10ms, 130ms, 350ms, 770ms, 1590ms}) {
    CAPTURE(at.count());
    CHECK(waves.arrivals.at(bucket_of(at)) == n);
  }
  CHECK(herd::peak(waves.retry_arrivals) == n);
  // Between the waves, nothing arrives at all.
  CHECK(std::accumulate(waves.arrivals.begin(), waves.arrivals.begin() + bucket_of(1590ms) + 1, 0u) == 5 * n);
  // The wave that meets the recovered dependency: exactly its capacity is
  // served (they all arrive at the same instant); they finish at 1610 ms.
  const auto at_1610 = std::count(waves.ended.begin(), waves.ended.end(), herd::duration(1610ms));
  CHECK(at_1610 == 100);
  CHECK(waves.succeeded >= 100);
  // The next wave, 10 + 1600 + 10 ms later, holds everyone else.
  CHECK(waves.arrivals.at(bucket_of(3210ms)) == n - 100);

  const auto spread = herd::run_outage(exact_outage(strategy::full, n));
  const auto peak_retries = herd::peak(spread.retry_arrivals);
  CAPTURE(peak_retries);
  CHECK(peak_retries < n / 4);
  const auto wave_row = herd::summarize_outage(exact_outage(strategy::exponential, n), waves);
  const auto spread_row = herd::summarize_outage(exact_outage(strategy::full, n), spread);
  CHECK(wave_row.peak_after_recovery == n);
  CHECK(spread_row.peak_after_recovery < n / 8);
  // Spreading the herd is what lets the recovered dependency serve it.
  CHECK(spread_row.success_rate == 1.0);
  CHECK(spread_row.p99 < wave_row.p99);
}

TEST_CASE("with the budget on, total retries stop at the bucket's limit") {
  for (strategy s : herd::all_strategies) {
    CAPTURE(herd::to_string(s));
    auto c = exact_outage(s, 1000);
    c.budget = true;
    const auto r = herd::run_outage(c);
    // At most capacity + N x 0.1 retries; here every client starts while
    // the bucket is full, so the deposits overflow and only the 20 tokens
    // it started with are ever spent.
    CHECK(r.retries <= 20 + 1000 / 10);
    CHECK(r.retries == 20);
    CHECK(r.calls == 1000 + 20);
    CHECK(r.budget_stops == 1000 - r.succeeded);
    c.budget = false;
    CHECK(herd::run_outage(c).retries > 1000);
  }
}

TEST_CASE("the budget bounds retries in the contention model too") {
  for (unsigned clients : {10u, 60u}) {
    herd::contention_config c;
    c.clients = clients;
    c.retry = strategy::no_backoff;
    c.budget = true;
    c.seed = 3;
    const auto r = herd::run_contention(c);
    CHECK(r.retries <= 20 + clients / 10);
    CHECK(r.succeeded + r.budget_stops == clients);
  }
}

TEST_CASE("contention: jitter needs fewer calls than waiting in step for 50 clients and more") {
  for (unsigned clients : {50u, 100u}) {
    CAPTURE(clients);
    const double none = mean_calls(strategy::no_backoff, clients, 4);
    const double exponential = mean_calls(strategy::exponential, clients, 4);
    const double full = mean_calls(strategy::full, clients, 4);
    const double decorrelated = mean_calls(strategy::decorrelated, clients, 4);
    CAPTURE(none);
    CAPTURE(exponential);
    CAPTURE(full);
    CAPTURE(decorrelated);
    CHECK(full < exponential);
    CHECK(decorrelated < exponential);
    CHECK(full < none);
  }
}

TEST_CASE("contention: every client eventually writes once without a budget") {
  herd::contention_config c;
  c.clients = 40;
  c.retry = strategy::equal;
  c.seed = 11;
  const auto r = herd::run_contention(c);
  CHECK(r.succeeded == 40);
  // One write succeeds per client; each of the other calls was a conflict.
  CHECK(r.calls == std::accumulate(r.attempts.begin(), r.attempts.end(), std::uint64_t{0}));
  CHECK(r.calls >= 40);
  CHECK(r.completion == *std::max_element(r.ended.begin(), r.ended.end()));
}

TEST_CASE("strategies map onto coretry's backoff policy") {
  const auto none = herd::backoff_for(strategy::no_backoff, 5ms, 2s);
  CHECK(none.initial_window == herd::duration::zero());
  CHECK(none.max_window == herd::duration::zero());
  CHECK(none.jitter == coretry::jitter_kind::none);
  const auto exponential = herd::backoff_for(strategy::exponential, 5ms, 2s);
  CHECK(exponential.initial_window == 5ms);
  CHECK(exponential.max_window == 2s);
  CHECK(exponential.jitter == coretry::jitter_kind::none);
  CHECK(herd::backoff_for(strategy::decorrelated, 5ms, 2s).jitter == coretry::jitter_kind::decorrelated);
  for (strategy s : herd::all_strategies) CHECK(herd::parse_strategy(herd::to_string(s)) == s);
  CHECK_FALSE(herd::parse_strategy("jitter"));
}

TEST_CASE("percentiles by nearest rank") {
  std::vector<herd::duration> v;
  for (int i = 1; i <= 100; ++i) v.push_back(std::chrono::milliseconds(i));
  CHECK(herd::percentile(v, 0.5) == 50ms);
  CHECK(herd::percentile(v, 0.99) == 99ms);
  CHECK(herd::percentile(v, 1.0) == 100ms);
  CHECK(herd::percentile({}, 0.5) == herd::duration::zero());
}

TEST_CASE("bad configurations are refused naming the problem") {
  herd::outage_config c;
  c.clients = 0;
  CHECK_THROWS_WITH_AS(herd::run_outage(c), "clients must be at least 1", std::invalid_argument);
  c.clients = 10;
  c.outage = -1ms;
  CHECK_THROWS_WITH_AS(herd::run_outage(c), "outage must not be negative", std::invalid_argument);
}

TEST_CASE("outage counts: retries wasted while down, and calls turned away for capacity once back") {
  for (bool gate : {false, true})
    for (strategy s : herd::all_strategies) {
      CAPTURE(herd::to_string(s));
      CAPTURE(gate);
      auto c = exact_outage(s, 300);
      c.gate = gate;
      const auto r = herd::run_outage(c);
      // Every message takes exactly 10 ms, so the buckets before the
      // outage's end hold exactly the calls made while it was down.
      const std::size_t back = std::min(bucket_of(c.outage), r.arrivals.size()); // the run may end before
      const auto retries_while_down =
          std::accumulate(r.retry_arrivals.begin(), r.retry_arrivals.begin() + static_cast<std::ptrdiff_t>(back),
                          std::uint64_t{0});
      CHECK(r.failed_retries_in_outage == retries_while_down);
      // Once back, a call is served (and its client done) or turned away.
      const auto calls_after =
          std::accumulate(r.arrivals.begin() + static_cast<std::ptrdiff_t>(back), r.arrivals.end(), std::uint64_t{0});
      CHECK(r.rejected_after_recovery == calls_after - r.succeeded);
    }
}

TEST_CASE("with the gate on, an outage wastes almost no retries and the recovery is not flooded") {
  // The scenario of the documentation's figures: 1,000 clients, down for 2 s,
  // then 100 at a time, a 30 s deadline, full jitter, the default network.
  herd::outage_config c;
  c.outage = 2s;
  c.retry = strategy::full;
  c.seed = herd::run_seed(1, "outage", c.clients, 0);
  c.gate = true;
  const auto gated = herd::summarize_outage(c, herd::run_outage(c));
  c.gate = false;
  const auto free = herd::summarize_outage(c, herd::run_outage(c));
  CHECK(static_cast<double>(gated.failed_retries_in_outage) / 1000 <= 0.1);
  CHECK(static_cast<double>(gated.rejected_after_recovery) / 1000 <= 0.2);
  CHECK(gated.success_rate >= 0.95);
  CHECK(gated.p99 <= c.outage + 1s);
  // Without it, each client spends several retries on the dead dependency.
  CHECK(static_cast<double>(free.failed_retries_in_outage) / 1000 >= 3.0);
}

TEST_CASE("with the gate on, a dependency that never comes back stops every client by its deadline") {
  auto c = exact_outage(strategy::full, 300);
  c.outage = 1h;
  c.deadline = 5s;
  c.gate = true;
  const auto r = herd::run_outage(c);
  CHECK(r.succeeded == 0);
  CHECK(r.gate_stops > 0);
  for (std::size_t i = 0; i < r.ended.size(); ++i) {
    CAPTURE(i);
    CHECK(r.ended[i] <= c.deadline);
    CHECK((r.stops[i] == coretry::stop_reason::dependency_unhealthy ||
           r.stops[i] == coretry::stop_reason::deadline_exhausted));
  }
  // Held, the clients sent about one probe per 100 ms between them.
  CHECK(r.retries <= 5s / 100ms + 10);
}
