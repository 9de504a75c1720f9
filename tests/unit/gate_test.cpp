// The retry gate's model, without Asio: every instant passed in, every
// answer exact.

#include <coretry/gate.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using coretry::attempt_status;
using coretry::duration;
using coretry::gate_decision;
using coretry::gate_model;
using action = coretry::gate_decision::action;

namespace {

constexpr duration never = duration::max();

/// A small gate: 1 s window, judged from 10 results, one probe per 100 ms,
/// two successes per doubling, two doublings before it opens.
gate_model::options small() {
  return {.window = 1s,
          .min_requests = 10,
          .k = 2.0,
          .close_above = 0.2,
          .probe_interval = 100ms,
          .step_successes = 2,
          .slow_start_steps = 2,
          .max_hold = 10s};
}

void fail_n(gate_model& g, int n, duration at) {
  for (int i = 0; i < n; ++i) g.record(attempt_status::transient, at);
}

bool is_wait_until(const gate_decision& d, duration at) { return d.what == action::wait && d.at == at; }

} // namespace

TEST_CASE("gate model: a mostly failing dependency closes it, once enough results are in") {
  gate_model g(small());
  for (int i = 0; i < 9; ++i) g.record(attempt_status::transient, duration(i * 1ms));
  // Nine failures are fewer than min_requests: still open.
  CHECK(g.current() == gate_model::state::open);
  CHECK(g.ask(9ms, never, nullptr).what == action::admit);
  g.record(attempt_status::transient, 9ms);
  CHECK(g.current() == gate_model::state::recovering);
  CHECK(g.level() == 0);
  CHECK(g.slot_interval() == 100ms);

  // 4 failures in 10 (40%): p = (10 - 12) / 11 < 0, open.
  gate_model mostly_fine(small());
  for (int i = 0; i < 6; ++i) mostly_fine.record(attempt_status::success, 0ms);
  fail_n(mostly_fine, 4, 0ms);
  CHECK(mostly_fine.current() == gate_model::state::open);
  // 7 failures in 10: p = (10 - 6) / 11 = 0.36 > 0.2, closed.
  gate_model mostly_failing(small());
  for (int i = 0; i < 3; ++i) mostly_failing.record(attempt_status::success, 0ms);
  fail_n(mostly_failing, 7, 0ms);
  CHECK(mostly_failing.current() == gate_model::state::recovering);
}

TEST_CASE("gate model: permanent rejections are no health signal") {
  gate_model g(small());
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
  gate_model g(small());
  fail_n(g, 9, 0ms);
  CHECK(g.window_counts(0ms).requests == 9);
  // 1.5 s later the buckets of the first 100 ms are out of the 1 s window.
  fail_n(g, 1, 1500ms);
  CHECK(g.window_counts(1500ms).requests == 1);
  CHECK(g.current() == gate_model::state::open);
}

TEST_CASE("gate model: probes at the probe interval, each held retry its own slot") {
  gate_model g(small());
  fail_n(g, 10, 9ms); // closes at 9 ms: the first slot is 9 ms
  REQUIRE(g.current() == gate_model::state::recovering);
  CHECK(g.ask(9ms, never, nullptr).what == action::admit);
  const gate_decision second = g.ask(10ms, never, nullptr);
  CHECK(is_wait_until(second, 109ms));
  const gate_decision third = g.ask(11ms, never, nullptr);
  CHECK(is_wait_until(third, 209ms));
  // A slot after the retry's last useful instant is not reserved: deny.
  CHECK(g.ask(12ms, 250ms, nullptr).what == action::deny);
  CHECK(is_wait_until(g.ask(13ms, never, nullptr), 309ms));
  // Coming back early for a slot: wait again for the same one.
  CHECK(is_wait_until(g.ask(100ms, never, &second), 109ms));
  // At its slot, the holder is admitted without taking another.
  CHECK(g.ask(109ms, never, &second).what == action::admit);
  CHECK(g.ask(209ms, never, &third).what == action::admit);
  CHECK(is_wait_until(g.ask(210ms, never, nullptr), 409ms));
  // A wait longer than max_hold is a deny.
  auto o = small();
  o.max_hold = 150ms;
  gate_model short_hold(o);
  fail_n(short_hold, 10, 0ms);
  CHECK(short_hold.ask(0ms, never, nullptr).what == action::admit);
  CHECK(is_wait_until(short_hold.ask(0ms, never, nullptr), 100ms));
  CHECK(short_hold.ask(0ms, never, nullptr).what == action::deny);
}

TEST_CASE("gate model: slow start doubles the rate per two successes, then opens") {
  gate_model g(small());
  fail_n(g, 10, 0ms);
  CHECK(g.ask(0ms, never, nullptr).what == action::admit); // next slot 100 ms
  g.record(attempt_status::success, 10ms);
  CHECK(g.level() == 0);
  g.record(attempt_status::success, 20ms);
  CHECK(g.level() == 1);
  CHECK(g.slot_interval() == 50ms);
  // The slot already due is 100 ms; those after it come every 50 ms now.
  CHECK(is_wait_until(g.ask(30ms, never, nullptr), 100ms));
  CHECK(is_wait_until(g.ask(30ms, never, nullptr), 150ms));
  CHECK(is_wait_until(g.ask(30ms, never, nullptr), 200ms));
  g.record(attempt_status::success, 40ms);
  g.record(attempt_status::success, 50ms);
  CHECK(g.level() == 2);
  CHECK(g.slot_interval() == 25ms);
  CHECK(is_wait_until(g.ask(60ms, never, nullptr), 250ms));
  CHECK(is_wait_until(g.ask(60ms, never, nullptr), 275ms));
  g.record(attempt_status::success, 70ms);
  g.record(attempt_status::success, 80ms);
  // Up from the last level: open, and the outage's ten failures are forgotten.
  CHECK(g.current() == gate_model::state::open);
  CHECK(g.window_counts(80ms).requests == 0);
  CHECK(g.ask(90ms, never, nullptr).what == action::admit);
  // A holder of a slot is admitted at once when it comes back to an open gate.
  const gate_decision stale = gate_decision::wait_until(300ms, 1);
  CHECK(g.ask(90ms, never, &stale).what == action::admit);
}

TEST_CASE("gate model: failures during slow start fall back to probes and revoke faster slots") {
  gate_model g(small());
  fail_n(g, 10, 0ms);
  CHECK(g.ask(0ms, never, nullptr).what == action::admit);
  g.record(attempt_status::success, 10ms);
  g.record(attempt_status::success, 20ms);
  REQUIRE(g.level() == 1);
  const gate_decision a = g.ask(30ms, never, nullptr);
  const gate_decision b = g.ask(30ms, never, nullptr);
  CHECK(is_wait_until(a, 100ms));
  CHECK(is_wait_until(b, 150ms));
  // One failure does not knock it back; two (p = 2/3) do.
  g.record(attempt_status::transient, 40ms);
  CHECK(g.level() == 1);
  g.record(attempt_status::transient, 50ms);
  CHECK(g.level() == 0);
  CHECK(g.slot_interval() == 100ms);
  // The revoked holders come back and get new slots at the probe rate,
  // starting one probe interval after the fall back (150 ms).
  CHECK(is_wait_until(g.ask(100ms, never, &a), 150ms));
  CHECK(is_wait_until(g.ask(150ms, never, &b), 250ms));
}

TEST_CASE("gate model: a dependency failing half the time keeps it open") {
  SUBCASE("alternating, from a failure first") {
    gate_model g(small());
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
    auto o = small();
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
    auto o = small();
    o.step_successes = 4; // the default: two would judge from too few
    gate_model g(o);
    fail_n(g, 10, 0ms);
    REQUIRE(g.current() == gate_model::state::recovering);
    // S F S F S F S, then F S F S F S F S twice: each level reaches four
    // successes with p <= 0.2 (F S F S F S F alone is p = 1/8) and steps up.
    int results = 0;
    for (; results < 100 && g.current() != gate_model::state::open; ++results)
      g.record(results % 2 == 0 ? attempt_status::success : attempt_status::transient, duration(results * 10ms));
    CHECK(g.current() == gate_model::state::open);
    CHECK(results == 23);
  }
}

TEST_CASE("gate model: bad options are refused by name") {
  auto with = [](auto change) {
    auto o = small();
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
  CHECK_NOTHROW(coretry::local_gate{});
}

TEST_CASE("gate: threads sharing one gate record and ask concurrently, slots stay distinct") {
  // Four threads on interleaved virtual time (thread t at (4i + t) x 100 us,
  // no shared clock: the gate's own synchronisation is all there is between
  // them): a total outage, then recovery.
  coretry::local_gate gate(small());
  auto at = [](int i, int t) { return duration(std::chrono::microseconds((4 * i + t) * 100)); };
  constexpr int threads = 4;
  std::vector<std::vector<duration>> slots(threads);
  std::vector<std::thread> workers;
  std::atomic<int> ready{0};
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      std::optional<gate_decision> held;
      for (int i = 0; i < 5000; ++i) {
        const duration now = at(i, t);
        if (held && now < held->at) continue; // still asleep
        gate.record(attempt_status::transient, now);
        const gate_decision d = gate.ask(now, never, held ? &*held : nullptr);
        if (d.what == action::wait) {
          if (!held || held->at != d.at) slots[t].push_back(d.at);
          held = d;
        } else {
          held.reset();
        }
      }
    });
  for (auto& w : workers) w.join();
  CHECK_FALSE(gate.is_open());
  std::vector<duration> all;
  for (auto& s : slots) all.insert(all.end(), s.begin(), s.end());
  CHECK(all.size() > 10);
  CHECK(std::set<duration>(all.begin(), all.end()).size() == all.size()); // no slot given twice

  // The dependency recovers: successes from every thread open the gate again.
  workers.clear();
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const duration now = 2s + at(i, t);
        gate.record(attempt_status::success, now);
        (void)gate.ask(now, never, nullptr);
      }
    });
  for (auto& w : workers) w.join();
  CHECK(gate.is_open());
  CHECK(gate.level() == 0);
}
