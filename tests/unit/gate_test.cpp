// The retry gate's model, without Asio: every instant passed in, every
// answer exact.

#include <policies.hpp>

#include <coretry/gate.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <vector>

using namespace std::chrono_literals;
using coretry::attempt_status;
using coretry::duration;
using coretry::gate_decision;
using coretry::gate_model;
using coretry::test::small_gate;
using action = coretry::gate_decision::action;

namespace {

constexpr duration never = duration::max();

/// Whether `d` tells a retry asked at `asked` to ask again, holding no slot,
/// between one and two recheck intervals (100 ms) later.
bool is_recheck(const gate_decision& d, duration asked) {
  return d.what == action::wait && d.ticket == 0 && d.at >= asked + 100ms && d.at < asked + 200ms;
}

void fail_n(gate_model& g, int n, duration at) {
  for (int i = 0; i < n; ++i) g.record(attempt_status::transient, at);
}

bool is_wait_until(const gate_decision& d, duration at) { return d.what == action::wait && d.at == at; }

} // namespace

TEST_CASE("gate model: a mostly failing dependency closes it, once enough results are in") {
  gate_model g(small_gate());
  for (int i = 0; i < 9; ++i) g.record(attempt_status::transient, duration(i * 1ms));
  // Nine failures are fewer than min_requests: still open.
  CHECK(g.current() == gate_model::state::open);
  CHECK(g.ask(9ms, never, nullptr).what == action::admit);
  g.record(attempt_status::transient, 9ms);
  CHECK(g.current() == gate_model::state::recovering);
  CHECK(g.level() == 0);
  CHECK(g.slot_interval() == 100ms);

  // 4 failures in 10 (40%): p = (10 - 12) / 11 < 0, open.
  gate_model mostly_fine(small_gate());
  for (int i = 0; i < 6; ++i) mostly_fine.record(attempt_status::success, 0ms);
  fail_n(mostly_fine, 4, 0ms);
  CHECK(mostly_fine.current() == gate_model::state::open);
  // 7 failures in 10: p = (10 - 6) / 11 = 0.36 > 0.2, closed.
  gate_model mostly_failing(small_gate());
  for (int i = 0; i < 3; ++i) mostly_failing.record(attempt_status::success, 0ms);
  fail_n(mostly_failing, 7, 0ms);
  CHECK(mostly_failing.current() == gate_model::state::recovering);
}

TEST_CASE("gate model: after any idle time the window counts again") {
  // Buckets of 100 us, their epochs kept modulo 2^24: a bucket last written
  // 8,388,610 epochs ago (half the modulus and a little more, about 14
  // minutes) must be taken as stale and overwritten, not as newer.
  auto o = small_gate();
  o.window = 1ms;
  gate_model g(o);
  g.record(attempt_status::transient, 0ms);
  const duration later = 8'388'610 * 100us;
  g.record(attempt_status::transient, later);
  CHECK(g.window_counts(later).requests == 1);
  // A result late by a whole window is dropped: the bucket holds newer ones.
  g.record(attempt_status::transient, later - 1ms);
  CHECK(g.window_counts(later).requests == 1);
}

TEST_CASE("gate model: permanent rejections are no health signal") {
  gate_model g(small_gate());
  for (int i = 0; i < 100; ++i) g.record(attempt_status::permanent, 0ms);
  CHECK(g.window_counts(0ms).requests == 0);
  CHECK(g.current() == gate_model::state::open);
  fail_n(g, 10, 0ms);
  REQUIRE(g.current() == gate_model::state::recovering);
  // Nor do they move the slow start.
  for (int i = 0; i < 100; ++i) g.record(attempt_status::permanent, 1ms);
  CHECK(g.level() == 0);
}

TEST_CASE("gate model: the window forgets old results") {
  gate_model g(small_gate());
  fail_n(g, 9, 0ms);
  CHECK(g.window_counts(0ms).requests == 9);
  // 1.5 s later the buckets of the first 100 ms are out of the 1 s window.
  fail_n(g, 1, 1500ms);
  CHECK(g.window_counts(1500ms).requests == 1);
  CHECK(g.current() == gate_model::state::open);
}

TEST_CASE("gate model: probes at the probe interval, only the next slot promised") {
  gate_model g(small_gate());
  fail_n(g, 10, 9ms); // closes at 9 ms: the first slot is 9 ms
  REQUIRE(g.current() == gate_model::state::recovering);
  const gate_decision first = g.ask(9ms, never, nullptr);
  CHECK(first.what == action::admit);
  const gate_decision second = g.ask(10ms, never, nullptr);
  CHECK(is_wait_until(second, 109ms));
  g.probe_ended(first.ticket); // (one probe at a time: see below)
  // The slot after (209 ms) is more than one slot ahead: not promised. The
  // retry is told to ask again, and nothing is reserved for it.
  const gate_decision third = g.ask(11ms, never, nullptr);
  CHECK(is_recheck(third, 11ms));
  // A slot after the retry's last useful instant: deny.
  CHECK(g.ask(12ms, 150ms, nullptr).what == action::deny);
  // Coming back early for a slot: wait again for the same one.
  CHECK(is_wait_until(g.ask(100ms, never, &second), 109ms));
  // At its slot, the holder is admitted without taking another.
  const gate_decision second_admitted = g.ask(109ms, never, &second);
  CHECK(second_admitted.what == action::admit);
  g.probe_ended(second_admitted.ticket);
  // The third comes back: 209 ms is now the next slot, and it is promised.
  const gate_decision promised = g.ask(third.at, never, &third);
  CHECK(is_wait_until(promised, 209ms));
  CHECK(g.ask(209ms, never, &promised).what == action::admit);
  // A retry that could not come back (a recheck interval of 1 s) before its
  // last useful instant takes a slot further ahead, if it is in time for it.
  auto slow = small_gate();
  slow.recheck_interval = 1s;
  gate_model h(slow);
  fail_n(h, 10, 0ms);
  CHECK(h.ask(0ms, never, nullptr).what == action::admit);
  CHECK(is_wait_until(h.ask(0ms, never, nullptr), 100ms));
  CHECK(is_wait_until(h.ask(1ms, 250ms, nullptr), 200ms)); // back after 1 s would be too late
  CHECK(h.ask(2ms, 250ms, nullptr).what == action::deny);   // 300 ms: too late as well
  const gate_decision later = h.ask(3ms, never, nullptr);   // time to come back: told to
  CHECK((later.what == action::wait && later.ticket == 0 && later.at >= 1003ms && later.at < 2003ms));
  // A wait longer than max_hold is a deny.
  auto o = small_gate();
  o.max_hold = 150ms;
  o.slots_ahead = 10;
  gate_model short_hold(o);
  fail_n(short_hold, 10, 0ms);
  CHECK(short_hold.ask(0ms, never, nullptr).what == action::admit);
  CHECK(is_wait_until(short_hold.ask(0ms, never, nullptr), 100ms));
  CHECK(short_hold.ask(0ms, never, nullptr).what == action::deny);
}

TEST_CASE("gate model: retries told to ask again come back spread, by a fixed sequence") {
  gate_model g(small_gate());
  fail_n(g, 10, 0ms);
  CHECK(g.ask(0ms, never, nullptr).what == action::admit);
  CHECK(is_wait_until(g.ask(0ms, never, nullptr), 100ms));
  // Eight more retries asking at the same instant: each told to come back at
  // 100 ms + 100 ms x frac(k x 0x9e3779b9 / 2^32), k = 1..8, all different.
  std::vector<duration> again;
  for (int k = 1; k <= 8; ++k) {
    const gate_decision d = g.ask(0ms, never, nullptr);
    REQUIRE(is_recheck(d, 0ms));
    const std::uint32_t point = static_cast<std::uint32_t>(k * 0x9e3779b9ULL);
    CHECK(d.at == 100ms + duration(static_cast<duration::rep>(1e8 * (point / 4294967296.0))));
    again.push_back(d.at);
  }
  std::sort(again.begin(), again.end());
  CHECK(std::adjacent_find(again.begin(), again.end()) == again.end());
  // Spread: no two closer than 5 ms (eight golden-ratio points in 100 ms).
  for (std::size_t i = 1; i < again.size(); ++i) CHECK(again[i] - again[i - 1] >= 5ms);
  // One that could not come back in time, and whose slot is too late, is denied.
  CHECK(g.ask(0ms, 150ms, nullptr).what == action::deny);
}

TEST_CASE("gate model: slow start doubles the rate per two successes, then opens") {
  gate_model g(small_gate());
  fail_n(g, 10, 0ms);
  CHECK(g.ask(0ms, never, nullptr).what == action::admit); // next slot 100 ms
  g.record(attempt_status::success, 10ms);
  CHECK(g.level() == 0);
  g.record(attempt_status::success, 20ms);
  CHECK(g.level() == 1);
  CHECK(g.slot_interval() == 50ms);
  // The slot already due is 100 ms; those after it come every 50 ms now, and
  // only the next one is promised.
  CHECK(is_recheck(g.ask(30ms, never, nullptr), 30ms));
  CHECK(is_wait_until(g.ask(50ms, never, nullptr), 100ms));
  CHECK(is_wait_until(g.ask(100ms, never, nullptr), 150ms));
  CHECK(is_recheck(g.ask(100ms, never, nullptr), 100ms));
  g.record(attempt_status::success, 110ms);
  g.record(attempt_status::success, 120ms);
  CHECK(g.level() == 2);
  CHECK(g.slot_interval() == 25ms);
  CHECK(is_wait_until(g.ask(176ms, never, nullptr), 200ms));
  CHECK(is_wait_until(g.ask(200ms, never, nullptr), 225ms));
  g.record(attempt_status::success, 230ms);
  g.record(attempt_status::success, 240ms);
  // Up from the last level: open, and the outage's ten failures are forgotten.
  CHECK(g.current() == gate_model::state::open);
  CHECK(g.window_counts(240ms).requests == 0);
  CHECK(g.ask(250ms, never, nullptr).what == action::admit);
  // A holder of a slot is admitted at once when it comes back to an open gate.
  const gate_decision stale = gate_decision::wait_until(300ms, 1);
  CHECK(g.ask(250ms, never, &stale).what == action::admit);
}

TEST_CASE("gate model: failures during slow start fall back to probes and revoke faster slots") {
  gate_model g(small_gate());
  fail_n(g, 10, 0ms);
  CHECK(g.ask(0ms, never, nullptr).what == action::admit);
  g.record(attempt_status::success, 10ms);
  g.record(attempt_status::success, 20ms);
  REQUIRE(g.level() == 1);
  const gate_decision a = g.ask(50ms, never, nullptr);
  const gate_decision b = g.ask(100ms, never, nullptr);
  CHECK(is_wait_until(a, 100ms));
  CHECK(is_wait_until(b, 150ms));
  // One failure does not knock it back; two (p = 2/3) do.
  g.record(attempt_status::transient, 110ms);
  CHECK(g.level() == 1);
  g.record(attempt_status::transient, 120ms);
  CHECK(g.level() == 0);
  CHECK(g.slot_interval() == 100ms);
  // The revoked holders come back and get new slots at the probe rate,
  // starting one probe interval after the fall back (220 ms).
  CHECK(is_wait_until(g.ask(150ms, never, &a), 220ms));
  CHECK(is_recheck(g.ask(150ms, never, &b), 150ms));
  CHECK(is_wait_until(g.ask(220ms, never, &b), 320ms));
  // Failures needed to fall back are their own option: with four (the
  // default), two failures at level 1 do not.
  auto o = small_gate();
  o.fallback_failures = 4;
  gate_model patient(o);
  fail_n(patient, 10, 0ms);
  patient.record(attempt_status::success, 10ms);
  patient.record(attempt_status::success, 20ms);
  REQUIRE(patient.level() == 1);
  patient.record(attempt_status::transient, 30ms);
  patient.record(attempt_status::transient, 40ms);
  CHECK(patient.level() == 1);
  patient.record(attempt_status::transient, 50ms);
  patient.record(attempt_status::transient, 60ms);
  CHECK(patient.level() == 0);
}

TEST_CASE("gate model: a dependency failing half the time keeps it open") {
  SUBCASE("alternating, from a failure first") {
    gate_model g(small_gate());
    for (int i = 0; i < 5000; ++i) {
      const duration at = duration(i * 1ms);
      g.record(i % 2 == 0 ? attempt_status::transient : attempt_status::success, at);
      REQUIRE(g.current() == gate_model::state::open);
      REQUIRE(g.ask(at, never, nullptr).what == action::admit);
    }
  }
  SUBCASE("random, 50% and 90%, judged from 100 results (the default)") {
    // A few results say little: judged from 10, a fair coin shows 7 failures
    // in 10 about one time in six. From 100 the noise stays below the bar.
    auto o = small_gate();
    o.min_requests = gate_model::options{}.min_requests;
    REQUIRE(o.min_requests == 100);
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
      CAPTURE(seed);
      coretry::testing::seeded_random random(seed);
      gate_model half(o), mostly(o);
      bool mostly_closed = false;
      for (int i = 0; i < 20000; ++i) {
        const duration at = duration(i * 500us);
        half.record(random.uniform(1) == 0 ? attempt_status::transient : attempt_status::success, at);
        REQUIRE(half.current() == gate_model::state::open);
        mostly.record(random.uniform(9) == 0 ? attempt_status::success : attempt_status::transient, at);
        mostly_closed = mostly_closed || mostly.current() == gate_model::state::recovering;
      }
      CHECK(mostly_closed);
    }
  }
  SUBCASE("a closed gate reopens when the dependency comes back half healthy") {
    auto o = small_gate();
    // The defaults: two successes step up, four failures fall back (two
    // would judge a fall back from too few), six steps.
    o.step_successes = gate_model::options{}.step_successes;
    o.fallback_failures = gate_model::options{}.fallback_failures;
    o.slow_start_steps = gate_model::options{}.slow_start_steps;
    REQUIRE(o.step_successes == 2);
    REQUIRE(o.fallback_failures == 4);
    gate_model g(o);
    fail_n(g, 10, 0ms);
    REQUIRE(g.current() == gate_model::state::recovering);
    // S F S, then F S F S at each of six levels: each level reaches two
    // successes with p <= 0.2 (F S F S is p = 0) before four failures.
    int results = 0;
    for (; results < 100 && g.current() != gate_model::state::open; ++results)
      g.record(results % 2 == 0 ? attempt_status::success : attempt_status::transient, duration(results * 10ms));
    CHECK(g.current() == gate_model::state::open);
    CHECK(results == 3 + 4 * 6);
  }
}

TEST_CASE("gate model: bad options are refused by name") {
  auto with = [](auto change) {
    auto o = small_gate();
    change(o);
    return o;
  };
  using o_t = gate_model::options;
  CHECK_THROWS_WITH_AS(gate_model(with([](o_t& o) { o.window = 0ms; })), doctest::Contains("window"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(gate_model(with([](o_t& o) { o.min_requests = 0; })), doctest::Contains("min_requests"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(gate_model(with([](o_t& o) { o.k = 0.5; })), doctest::Contains("k must"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(gate_model(with([](o_t& o) { o.close_above = 1.0; })), doctest::Contains("close_above"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(gate_model(with([](o_t& o) { o.probe_interval = 0ms; })),
                       doctest::Contains("probe_interval"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(gate_model(with([](o_t& o) { o.step_successes = 0; })), doctest::Contains("step_successes"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(gate_model(with([](o_t& o) { o.slow_start_steps = 31; })),
                       doctest::Contains("slow_start_steps"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(gate_model(with([](o_t& o) { o.max_hold = 0ms; })), doctest::Contains("max_hold"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(gate_model(with([](o_t& o) { o.probe_timeout = 0ms; })), doctest::Contains("probe_timeout"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(gate_model(with([](o_t& o) { o.fallback_failures = 0; })),
                       doctest::Contains("fallback_failures"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(gate_model(with([](o_t& o) { o.slots_ahead = 0; })), doctest::Contains("slots_ahead"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(gate_model(with([](o_t& o) { o.recheck_interval = 0ms; })),
                       doctest::Contains("recheck_interval"), std::invalid_argument);
  CHECK_NOTHROW(coretry::local_gate{});
}

TEST_CASE("gate: first attempts are throttled only when asked, with the window's failure pressure") {
  coretry::testing::scripted_random draws{0.3, 0.9};
  SUBCASE("off by default: a closed gate still lets every first attempt through, drawing nothing") {
    coretry::local_gate gate(small_gate());
    for (int i = 0; i < 10; ++i) gate.record(attempt_status::transient, 0ms);
    REQUIRE_FALSE(gate.is_open());
    CHECK(gate.allow_first_attempt(1ms, draws));
    CHECK(draws.draws_used() == 0);
    CHECK(gate.counts().throttled == 0);
  }
  SUBCASE("on: rejected with probability p once the window holds min_requests results") {
    auto o = small_gate();
    o.throttle_first_attempts = true;
    coretry::local_gate gate(o);
    for (int i = 0; i < 9; ++i) gate.record(attempt_status::transient, 0ms);
    CHECK(gate.allow_first_attempt(1ms, draws)); // nine results: too few to judge
    CHECK(draws.draws_used() == 0);
    // 10 requests, 2 accepts: p = (10 - 2 x 2) / 11 = 6/11, about 0.545.
    gate.record(attempt_status::success, 0ms);
    gate.record(attempt_status::success, 0ms);
    gate_model m(o);
    for (int i = 0; i < 8; ++i) m.record(attempt_status::transient, 0ms);
    for (int i = 0; i < 2; ++i) m.record(attempt_status::success, 0ms);
    CHECK(m.first_attempt_rejection(1ms) == doctest::Approx(6.0 / 11.0));
    // (the gate above has 9 failures and 2 successes: p = (11 - 4) / 12)
    CHECK_FALSE(gate.allow_first_attempt(1ms, draws)); // draw 0.3 < 7/12: rejected
    CHECK(gate.allow_first_attempt(1ms, draws));       // draw 0.9: through
    CHECK(draws.draws_used() == 2);
    CHECK(gate.counts().throttled == 1);
    // A healthy window (p = 0) draws nothing and rejects nothing.
    coretry::local_gate healthy(o);
    for (int i = 0; i < 20; ++i) healthy.record(attempt_status::success, 0ms);
    CHECK(healthy.allow_first_attempt(1ms, draws));
    CHECK(draws.draws_used() == 2);
  }
}

TEST_CASE("gate model: while closed, one probe at a time") {
  gate_model g(small_gate());
  fail_n(g, 10, 0ms);
  const gate_decision first = g.ask(0ms, never, nullptr);
  REQUIRE(first.what == action::admit);
  CHECK(first.ticket != 0); // a probe: the gate wants to hear when it ends
  // The next slot (100 ms) is promised as usual, but when it comes while
  // the first probe is still out, its holder is told to ask again.
  const gate_decision second = g.ask(50ms, never, nullptr);
  REQUIRE(is_wait_until(second, 100ms));
  CHECK(is_recheck(g.ask(100ms, never, &second), 100ms));
  // A slot free at once is not taken either while the probe is out.
  CHECK(is_recheck(g.ask(200ms, never, nullptr), 200ms));
  // Once it has ended, the next retry to ask is the next probe.
  g.probe_ended(first.ticket);
  const gate_decision third = g.ask(210ms, never, nullptr);
  REQUIRE(third.what == action::admit);
  CHECK(third.ticket != first.ticket);
  // An old ticket ending changes nothing: the third is still out.
  g.probe_ended(first.ticket);
  CHECK(is_recheck(g.ask(400ms, never, nullptr), 400ms));
  // A probe that never ends holds the next back only for probe_timeout (1 s).
  CHECK(is_recheck(g.ask(1200ms, never, nullptr), 1200ms));
  CHECK(g.ask(1210ms, never, nullptr).what == action::admit);
  // An open gate's admissions are no probes.
  gate_model open(small_gate());
  CHECK(open.ask(0ms, never, nullptr).ticket == 0);
}

TEST_CASE("gate model: once the rate has grown, probes overlap") {
  gate_model g(small_gate());
  fail_n(g, 10, 0ms);
  const gate_decision first = g.ask(0ms, never, nullptr);
  g.record(attempt_status::success, 10ms);
  g.probe_ended(first.ticket);
  const gate_decision second = g.ask(100ms, never, nullptr);
  REQUIRE(second.what == action::admit);
  g.record(attempt_status::success, 110ms);
  g.probe_ended(second.ticket);
  REQUIRE(g.level() == 1);
  CHECK(g.ask(200ms, never, nullptr).what == action::admit); // level 1: a slot per 50 ms
  CHECK(g.ask(250ms, never, nullptr).what == action::admit); // the one at 200 ms is still out
}

TEST_CASE("gate model in a fleet: members closing together take their first slots at their own phases") {
  // Two members of a fleet of two: slots every 2 x 100 ms. Both close at
  // 1 s; the one at phase 0 sends its first probe at once, the one at phase
  // 0.5 half a fleet slot (100 ms) later, never both at once.
  gate_model first(small_gate()), second(small_gate());
  first.set_fleet({}, 2, 0.0);
  second.set_fleet({}, 2, 0.5);
  fail_n(first, 10, 1s);
  fail_n(second, 10, 1s);
  REQUIRE(first.current() == gate_model::state::recovering);
  REQUIRE(second.current() == gate_model::state::recovering);
  CHECK(first.slot_interval() == 200ms);
  CHECK(first.ask(1s, never, nullptr).what == action::admit);
  CHECK(is_wait_until(second.ask(1s, never, nullptr), 1s + 100ms));
  // A phase out of range is taken at its nearest bound; a member on its own
  // (phase 0) is unchanged.
  gate_model alone(small_gate());
  alone.set_fleet({}, 1, -3.0);
  fail_n(alone, 10, 1s);
  CHECK(alone.ask(1s, never, nullptr).what == action::admit);
}

TEST_CASE("gate model in a fleet: the peers' results step the slow start as the gate's own do") {
  gate_model g(small_gate());
  fail_n(g, 10, 0ms);
  REQUIRE(g.current() == gate_model::state::recovering);
  // Open: peers' results do not step anything.
  gate_model open(small_gate());
  open.step_on_peers(100, 0, 0ms);
  CHECK(open.current() == gate_model::state::open);
  CHECK(open.level() == 0);
  // Two peer successes: one level up (at most one per call, however many).
  g.step_on_peers(2, 0, 10ms);
  CHECK(g.level() == 1);
  g.step_on_peers(50, 0, 20ms);
  CHECK(g.level() == 2);
  // Failures with p above close_above: back to probes.
  g.step_on_peers(0, 5, 30ms);
  CHECK(g.level() == 0);
  CHECK(g.current() == gate_model::state::recovering);
  // Enough successes opens it, as its own would.
  g.step_on_peers(2, 0, 40ms);
  g.step_on_peers(2, 0, 50ms);
  g.step_on_peers(2, 0, 60ms);
  CHECK(g.current() == gate_model::state::open);
}

TEST_CASE("local gate in a fleet: while recovering, what the peers' counts grew by steps the slow start") {
  coretry::local_gate g(small_gate());
  for (int i = 0; i < 10; ++i) g.record(attempt_status::transient, 0ms);
  REQUIRE_FALSE(g.is_open());
  // The first exchange brings the window's counts: 40 requests, 2 accepts
  // (mostly failures: no step up).
  g.set_fleet({40, 2}, 2, 10ms);
  CHECK(g.level() == 0);
  // The next brings 2 more accepts and nothing else failed: one level up.
  g.set_fleet({42, 4}, 2, 20ms);
  CHECK(g.level() == 1);
  // A window that slid (fewer counts than before) brings nothing new.
  g.set_fleet({10, 4}, 2, 30ms);
  CHECK(g.level() == 1);
  // Peers failing again: back to probes.
  g.set_fleet({20, 4}, 2, 40ms);
  CHECK(g.level() == 0);
}
