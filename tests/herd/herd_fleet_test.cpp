// The herd spread over processes: each with its own budget and gate (local),
// or sharing them through the model of the Redis store (shared), on virtual
// time. Every figure is exact for its seed.

#include "herd/fleet_store.hpp"
#include "herd/herd_sim.hpp"

#include <doctest/doctest.h>

#include <cstdint>

using namespace std::chrono_literals;
using herd::fleet_mode;
using herd::strategy;

namespace {

constexpr std::int64_t token = 1'000'000;

/// The outage of the documentation's fleet figures, with a network without
/// variance: 1,000 clients, down for `outage`, full jitter.
herd::outage_config fleet_outage(unsigned processes, fleet_mode fleet, bool budget, bool gate,
                                 herd::duration outage = 1s) {
  herd::outage_config c;
  c.retry = strategy::full;
  c.outage = outage;
  c.network = {10ms, 0ms};
  c.seed = 99;
  c.processes = processes;
  c.fleet = fleet;
  c.budget = budget;
  c.gate = gate;
  return c;
}

/// The fleet's bound: the bucket's capacity plus 0.1 token per request.
constexpr double fleet_bound(unsigned clients) {
  return herd::budget_capacity + herd::budget_tokens_per_initial_request * clients;
}

} // namespace

TEST_CASE("fleet_store: the bucket takes deposits up to its capacity and grants whole tokens") {
  herd::fleet_store store({20 * token, true, 0ms, 10, 500ms});
  CHECK(store.units() == 20 * token); // full before its first use
  auto r = store.exchange(0ms, {0, 5 * token, 5, 0, 0, false});
  CHECK(r.granted == 5); // the deposits overflowed: 20 - 5 left
  CHECK(r.units_left == 15 * token);
  CHECK(r.live == 1);
  r = store.exchange(10ms, {1, 0, 30, 0, 0, false});
  CHECK(r.granted == 15);
  CHECK(r.units_left == 0);
  CHECK(r.live == 2);
  r = store.exchange(20ms, {0, 2 * token + token / 2, 5, 0, 0, false});
  CHECK(r.granted == 2); // 2.5 tokens: whole ones only
  CHECK(r.units_left == token / 2);
  CHECK(r.peer_requests == 0); // no gate
  // A process not heard from for 500 ms is gone (process 1, last at 10 ms).
  r = store.exchange(510ms, {2, 0, 0, 0, 0, false});
  CHECK(r.live == 2);
}

TEST_CASE("fleet_store: the gate's window answers the other processes' counts, and forgets on opening") {
  herd::fleet_store store({20 * token, false, 1s, 10, 500ms});
  auto r = store.exchange(0ms, {0, 5 * token, 5, 100, 0, false});
  CHECK(r.granted == 0); // no budget
  CHECK(r.units_left == 0);
  CHECK(r.peer_requests == 0);
  r = store.exchange(10ms, {1, 0, 0, 50, 10, false});
  CHECK(r.peer_requests == 100);
  CHECK(r.peer_accepts == 0);
  r = store.exchange(1500ms, {0, 0, 0, 7, 7, false});
  CHECK(r.peer_requests == 50); // its own 107 are not counted
  CHECK(r.peer_accepts == 10);
  r = store.exchange(9999ms, {2, 0, 0, 0, 0, false});
  CHECK(r.peer_requests == 157); // the 10 buckets 0..9 s
  CHECK(r.peer_accepts == 17);
  r = store.exchange(10s, {2, 0, 0, 0, 0, false});
  CHECK(r.peer_requests == 7); // the bucket of 0..1 s has left the window
  r = store.exchange(10s, {1, 0, 0, 3, 3, true}); // its gate opened: the fleet forgets, then counts its news
  CHECK(r.peer_requests == 0);
  r = store.exchange(10s, {0, 0, 0, 0, 0, false});
  CHECK(r.peer_requests == 3);
  CHECK(r.peer_accepts == 3);
}

TEST_CASE("local fleets: every process spends its own bucket, so the outage's wasted retries grow with processes") {
  const auto one = herd::run_outage(fleet_outage(1, fleet_mode::local, true, false));
  const auto ten = herd::run_outage(fleet_outage(10, fleet_mode::local, true, false));
  const auto hundred = herd::run_outage(fleet_outage(100, fleet_mode::local, true, false));
  CAPTURE(ten.failed_retries_in_outage);
  CAPTURE(hundred.failed_retries_in_outage);
  CHECK(one.failed_retries_in_outage == 20);
  CHECK(ten.failed_retries_in_outage >= one.failed_retries_in_outage);
  CHECK(ten.failed_retries_in_outage > one.failed_retries_in_outage);
  CHECK(hundred.failed_retries_in_outage > ten.failed_retries_in_outage);
  // Ten buckets of 20, each spent on the dead dependency; a hundred are more than the fleet's bound.
  CHECK(ten.failed_retries_in_outage == 10 * 20);
  CHECK(static_cast<double>(hundred.failed_retries_in_outage) > 10 * fleet_bound(1000));
}

TEST_CASE("shared fleets: the outage's wasted retries stay within one bucket's bound for any number of processes") {
  for (unsigned processes : {1u, 2u, 10u, 100u})
    for (bool gate : {false, true}) {
      CAPTURE(processes);
      CAPTURE(gate);
      const auto r = herd::run_outage(fleet_outage(processes, fleet_mode::shared, true, gate));
      CAPTURE(r.failed_retries_in_outage);
      CHECK(static_cast<double>(r.failed_retries_in_outage) <= fleet_bound(1000));
      CHECK(static_cast<double>(r.retries) <= fleet_bound(1000)); // the whole run too
      if (processes >= 10) CHECK(r.failed_retries_in_outage > 0); // the bound is not met by sending none
    }
}

TEST_CASE("shared with one process is local with one process, but for the lease") {
  // The gate alone: the store tells a lone process nothing it does not know.
  const auto local_gate = herd::run_outage(fleet_outage(1, fleet_mode::local, false, true));
  const auto shared_gate = herd::run_outage(fleet_outage(1, fleet_mode::shared, false, true));
  CHECK(shared_gate.arrivals == local_gate.arrivals);
  CHECK(shared_gate.ended == local_gate.ended);
  CHECK(shared_gate.stops == local_gate.stops);
  CHECK(shared_gate.probes == local_gate.probes);
  // The budget: the process spends the fleet's bucket 5 leased tokens at a
  // time and has none before its first exchange (here at 34.5 ms, after the
  // first failures at 20 ms: every client is refused its first retry), so
  // never more than its own bucket; exchanging every millisecond, it spends
  // exactly what its own bucket would.
  for (strategy s : herd::all_strategies) {
    CAPTURE(herd::to_string(s));
    auto c = fleet_outage(1, fleet_mode::local, true, false);
    c.retry = s;
    const auto local = herd::run_outage(c);
    c.fleet = fleet_mode::shared;
    const auto shared = herd::run_outage(c);
    c.reconcile = 1ms;
    const auto often = herd::run_outage(c);
    CHECK(local.retries == 20);
    CHECK(shared.retries <= local.retries);
    CHECK(often.retries == local.retries);
    CHECK(shared.succeeded == local.succeeded);
  }
}

TEST_CASE("shared gates: a fleet of ten probes the dead dependency at one gate's rate, local ones at ten times it") {
  // A long outage, so that the rate is measured over many slots.
  const auto rate = [](unsigned processes, fleet_mode fleet) {
    const auto c = fleet_outage(processes, fleet, false, true, 10s);
    const auto r = herd::run_outage(c);
    const auto probes_per_s = herd::fleet_probe_rate(c, r);
    REQUIRE(probes_per_s);
    return *probes_per_s;
  };
  const double one = rate(1, fleet_mode::local);
  const double local = rate(10, fleet_mode::local);
  const double shared = rate(10, fleet_mode::shared);
  CAPTURE(one);
  CAPTURE(local);
  CAPTURE(shared);
  CHECK(one == doctest::Approx(10.0).epsilon(0.05)); // one probe per 100 ms
  CHECK(local >= 8 * one);
  CHECK(shared >= 0.8 * one);
  CHECK(shared <= 1.25 * one);
}

TEST_CASE("shared gates close on the fleet's failures where a hundred local ones, 10 clients each, never do") {
  const auto lc = fleet_outage(100, fleet_mode::local, false, true);
  const auto sc = fleet_outage(100, fleet_mode::shared, false, true);
  const auto local = herd::run_outage(lc);
  const auto shared = herd::run_outage(sc);
  CHECK_FALSE(herd::fleet_probe_rate(lc, local)); // a gate stayed open through the outage
  REQUIRE(herd::fleet_probe_rate(sc, shared));
  for (const auto& closed : shared.gate_closed) {
    REQUIRE(closed);
    CHECK(*closed < 200ms); // within a few exchanges of the first failures
  }
  CAPTURE(local.failed_retries_in_outage);
  CAPTURE(shared.failed_retries_in_outage);
  CHECK(shared.failed_retries_in_outage * 4 < local.failed_retries_in_outage);
}

TEST_CASE("fleets: the processes reconcile at phases spread over the period, offset by the seed") {
  auto c = fleet_outage(10, fleet_mode::shared, true, true);
  c.reconcile = 50ms;
  const herd::duration first = herd::reconcile_phase(c, 0);
  CHECK(first >= 0ms);
  CHECK(first < 5ms);
  for (unsigned p = 1; p < 10; ++p) {
    CAPTURE(p);
    CHECK(herd::reconcile_phase(c, p) - herd::reconcile_phase(c, p - 1) == 5ms);
  }
  CHECK(herd::reconcile_phase(c, 9) < 50ms);
  c.seed = 100;
  CHECK(herd::reconcile_phase(c, 0) != first);
  CHECK(herd::reconcile_phase(c, 0) < 5ms);
}

TEST_CASE("fleets: the probe rate counts probes from the instant the last gate closed to the recovery") {
  herd::outage_config c;
  c.outage = 1s;
  herd::run_result r;
  r.probes = {200ms, 400ms, 600ms, 800ms, 1200ms};
  r.gate_closed = {100ms, 500ms};
  const auto rate = herd::fleet_probe_rate(c, r);
  REQUIRE(rate);
  CHECK(*rate == doctest::Approx(4.0)); // 600 and 800 ms, in half a second
  r.gate_closed = {100ms, std::nullopt};
  CHECK_FALSE(herd::fleet_probe_rate(c, r));
  r.gate_closed = {100ms, 1s};
  CHECK_FALSE(herd::fleet_probe_rate(c, r));
  r.gate_closed.clear(); // no gate
  CHECK_FALSE(herd::fleet_probe_rate(c, r));
}

TEST_CASE("fleets: bad configurations are refused") {
  auto c = fleet_outage(0, fleet_mode::local, false, false);
  CHECK_THROWS_WITH_AS(herd::run_outage(c), "processes must be between 1 and the number of clients",
                       std::invalid_argument);
  c.processes = 1001;
  CHECK_THROWS_AS(herd::run_outage(c), std::invalid_argument);
  c.processes = 2;
  c.fleet = fleet_mode::shared;
  c.reconcile = 0ms;
  CHECK_THROWS_WITH_AS(herd::run_outage(c), "the reconciliation period must be positive", std::invalid_argument);
}
