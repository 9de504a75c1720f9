// The fleet parts of the budget and the gate, without a store: what a
// reconciler (coretry::redis::shared_state) sends and what it applies.

#include <policies.hpp>

#include <coretry/budget.hpp>
#include <coretry/gate.hpp>

#include <doctest/doctest.h>

#include <stdexcept>

using namespace std::chrono_literals;
using coretry::attempt_status;
using coretry::duration;
using coretry::gate_decision;
using coretry::gate_model;
using coretry::leased_budget;
using coretry::local_gate;
using coretry::test::small_gate;

TEST_CASE("fleet: a leased budget starts shared with no lease, and leases what an exchange grants") {
  leased_budget b({.capacity = 20.0, .tokens_per_initial_request = 0.1, .max_lease = 5});
  CHECK(b.shared());
  CHECK(b.leased() == 0);
  CHECK_FALSE(b.retry_available());
  CHECK_FALSE(b.try_acquire_retry()); // its local bucket is full, but it is shared
  CHECK(b.local_tokens() == doctest::Approx(20.0));

  auto r = b.begin_exchange();
  CHECK(r.want == 5);
  CHECK(r.deposit_units == 0);
  b.exchange_succeeded(3);
  CHECK(b.leased() == 3);
  CHECK(b.retry_available());
  CHECK(b.try_acquire_retry());
  CHECK(b.try_acquire_retry());
  CHECK(b.try_acquire_retry());
  CHECK_FALSE(b.try_acquire_retry());
  // The local bucket pays too (where it can), so that after a fall back
  // the process has what it would have had alone.
  CHECK(b.local_tokens() == doctest::Approx(17.0));

  b.exchange_succeeded(2);
  CHECK(b.begin_exchange().want == 3);
  b.exchange_succeeded(3);
  CHECK(b.leased() == 5);
  CHECK(b.begin_exchange().want == 0);
}

TEST_CASE("fleet: deposits are passed on in batches, exactly, and at most a bucket's worth") {
  leased_budget b({.capacity = 20.0, .tokens_per_initial_request = 0.1, .max_lease = 5});
  for (int i = 0; i < 37; ++i) b.record_initial_request();
  auto r = b.begin_exchange();
  CHECK(r.deposit_units == 37 * 100'000);
  CHECK(b.begin_exchange().deposit_units == 0); // taken once
  for (int i = 0; i < 1000; ++i) b.record_initial_request();
  CHECK(b.begin_exchange().deposit_units == 20 * leased_budget::units_per_token);

  leased_budget none({.capacity = 20.0, .tokens_per_initial_request = 0.0, .max_lease = 1});
  none.record_initial_request();
  CHECK(none.begin_exchange().deposit_units == 0);
}

TEST_CASE("fleet: deposits made while local stay local, and the local bucket never pays below empty") {
  leased_budget b({.capacity = 2.0, .tokens_per_initial_request = 0.5, .max_lease = 5});
  b.exchange_succeeded(5);
  CHECK(b.try_acquire_retry());
  CHECK(b.try_acquire_retry());
  CHECK(b.try_acquire_retry()); // the lease pays; the local bucket is empty after two
  CHECK(b.local_tokens() == doctest::Approx(0.0));
  CHECK(b.leased() == 2);
  CHECK(b.exchange_failed());
  CHECK_FALSE(b.try_acquire_retry()); // local: nothing left of what it spent while shared
  b.record_initial_request();
  b.record_initial_request();
  CHECK(b.local_tokens() == doctest::Approx(1.0));
  CHECK(b.begin_exchange().deposit_units == 0); // never passed on to the fleet
  CHECK(b.try_acquire_retry());
}

TEST_CASE("fleet: a failed exchange turns the budget local, keeping its lease, until one succeeds") {
  leased_budget b({.capacity = 2.0, .tokens_per_initial_request = 0.5, .max_lease = 5});
  b.begin_exchange();
  b.exchange_succeeded(2);
  for (int i = 0; i < 3; ++i) b.record_initial_request(); // the local bucket gets them too (capped at 2)
  b.begin_exchange();
  CHECK(b.exchange_failed());
  CHECK_FALSE(b.exchange_failed()); // already local
  CHECK_FALSE(b.shared());
  CHECK(b.leased() == 2);
  // Local: the process's own bucket (full: 2 tokens) pays.
  CHECK(b.try_acquire_retry());
  CHECK(b.try_acquire_retry());
  CHECK_FALSE(b.try_acquire_retry());
  CHECK_FALSE(b.retry_available());
  CHECK(b.leased() == 2);
  b.record_initial_request();
  b.record_initial_request();
  CHECK(b.try_acquire_retry());
  // Shared again: the kept lease pays.
  const auto r = b.begin_exchange();
  CHECK(r.want == 3);
  b.exchange_succeeded(0);
  CHECK(b.shared());
  CHECK(b.try_acquire_retry());
  CHECK(b.leased() == 1);
  CHECK_THROWS_AS(leased_budget({.capacity = 1.0, .tokens_per_initial_request = 0.1, .max_lease = 0}),
                  std::invalid_argument);
  CHECK_THROWS_AS(leased_budget({.capacity = 1.0, .tokens_per_initial_request = 0.1, .max_lease = 1001}),
                  std::invalid_argument);
}

namespace {

constexpr duration t0 = 1000s;

} // namespace

TEST_CASE("fleet: the gate judges its own window plus the peers' counts") {
  gate_model g(small_gate(1));
  g.record(attempt_status::success, t0);
  g.record(attempt_status::transient, t0);
  CHECK(g.window_counts(t0).requests == 2);
  CHECK(g.judged_counts(t0).requests == 2);
  g.set_fleet({.requests = 30, .accepts = 4}, 3);
  CHECK(g.peers().requests == 30);
  CHECK(g.peers().accepts == 4);
  CHECK(g.processes() == 3);
  CHECK(g.window_counts(t0).requests == 2);
  CHECK(g.judged_counts(t0).requests == 32);
  CHECK(g.judged_counts(t0).accepts == 5);
  CHECK(g.current() == gate_model::state::open);
  g.reconsider(t0); // the peers' failures close it
  CHECK(g.current() == gate_model::state::recovering);

  // Accepts never above requests, counts capped at 2^32 - 1.
  g.set_fleet({.requests = 3, .accepts = 9}, 0);
  CHECK(g.peers().accepts == 3);
  CHECK(g.processes() == 1);
  g.set_fleet({.requests = std::uint64_t{1} << 40, .accepts = 1}, 2);
  CHECK(g.peers().requests == 0xffffffffu);

  g.set_fleet({}, 1); // alone again
  CHECK(g.judged_counts(t0).requests == 2);
  CHECK(g.processes() == 1);
}

TEST_CASE("fleet: slots are spaced by the number of processes") {
  gate_model g(small_gate(1));
  g.set_fleet({.requests = 100, .accepts = 0}, 4);
  CHECK(g.slot_interval() == 400ms);
  const auto first = g.ask(t0, t0 + 10s, nullptr); // closes, admits a probe now
  CHECK(g.current() == gate_model::state::recovering);
  CHECK(first.what == gate_decision::action::admit);
  g.probe_ended(first.ticket);
  const auto second = g.ask(t0, t0 + 10s, nullptr);
  REQUIRE(second.what == gate_decision::action::wait);
  CHECK(second.at == t0 + 400ms);
  g.set_fleet({.requests = 100, .accepts = 0}, 1);
  CHECK(g.slot_interval() == 100ms);
  g.set_fleet({}, 2);
  CHECK(g.slot_interval() == 200ms);
}

TEST_CASE("fleet: when the gate opens it forgets the peers' counts and counts the opening") {
  gate_model g(small_gate(1));
  g.set_fleet({.requests = 100, .accepts = 0}, 2);
  g.reconsider(t0);
  REQUIRE(g.current() == gate_model::state::recovering);
  CHECK(g.openings() == 0);
  for (int i = 0; i < 4; ++i) g.record(attempt_status::success, t0 + 1ms); // level 0 -> 1 -> open
  CHECK(g.current() == gate_model::state::open);
  CHECK(g.openings() == 1);
  CHECK(g.peers().requests == 0);
  CHECK(g.peers().accepts == 0);
  CHECK(g.judged_counts(t0 + 1ms).requests == 0);
  CHECK(g.processes() == 2); // the fleet's size is kept
}

TEST_CASE("fleet: a local gate publishes what it recorded and closes on the fleet's counts") {
  local_gate g(small_gate(1));
  g.record(attempt_status::success, t0);
  g.record(attempt_status::transient, t0);
  g.record(attempt_status::permanent, t0); // not a health signal
  CHECK(g.recorded().requests == 2);
  CHECK(g.recorded().accepts == 1);
  CHECK(g.is_open());
  g.set_fleet({.requests = 5, .accepts = 5}, 2, t0);
  CHECK(g.is_open()); // healthy peers
  CHECK(g.processes() == 2);
  g.set_fleet({.requests = 50, .accepts = 0}, 2, t0);
  CHECK_FALSE(g.is_open());
  g.set_fleet({}, 1, t0); // back to its own window: it stays closed until it recovers
  CHECK_FALSE(g.is_open());
  CHECK(g.processes() == 1);
}
