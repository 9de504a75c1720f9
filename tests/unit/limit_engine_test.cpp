// The concurrency limit in the asynchronous layer, on virtual time: when an
// attempt gets its permit, waits for one, or is refused, exactly; and that a
// permit is held until the attempt's own operation has completed.

#include "test_support.hpp"

#include <policies.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <memory>

using namespace coretry_tests;
using coretry::stop_reason;

namespace {

/// A fixed limit (no adaptation) of `permits`, waits of at most `wait`.
coretry::concurrency_limit::options fixed_limit(unsigned permits, coretry::duration wait = 5ms,
                                                unsigned waiters = 64) {
  coretry::concurrency_limit::options o;
  o.adaptive = false;
  o.initial_limit = permits;
  o.min_limit = 1;
  o.max_wait = wait;
  o.max_waiters = waiters;
  return o;
}

/// Up to three attempts in 1 s, a fixed 10 ms backoff.
coretry::policy limited_policy() {
  coretry::policy p;
  p.max_attempts = 3;
  p.overall_deadline = 1s;
  p.backoff.jitter = coretry::jitter_kind::none;
  p.backoff.initial_window = 10ms;
  p.backoff.multiplier = 1.0;
  p.backoff.max_window = 10ms;
  return p;
}

/// Counts what a shared budget is told.
struct counting_budget final : coretry::retry_budget {
  int initial = 0, retries = 0;
  void record_initial_request() noexcept override { ++initial; }
  bool try_acquire_retry() noexcept override {
    ++retries;
    return true;
  }
};

/// Records permit waits and hedge events.
struct limit_events final : coretry::retry_observer {
  std::vector<coretry::permit_wait_event> waits;
  std::vector<coretry::hedge_result> hedges;
  void permit_waited(const coretry::permit_wait_event& e) noexcept override { waits.push_back(e); }
  void hedge(const coretry::hedge_event& e) noexcept override { hedges.push_back(e.result); }
};

/// An operation that ignores cancellation: it fails `takes` after it starts,
/// whatever it is told.
auto deaf_call(asio::io_context& io, coretry::duration takes) {
  return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code, int)>(
      [&io, takes](auto handler) {
        auto timer = std::make_shared<manual_timer>(io);
        timer->expires_after(takes);
        timer->async_wait([timer, h = std::move(handler)](boost::system::error_code) mutable {
          std::move(h)(asio::error::operation_aborted, 0);
        });
      },
      asio::deferred);
}

struct limited_run {
  explicit limited_run(coretry::concurrency_limit::options o) : limit(o) {
    options.safety = coretry::repeat_safety::idempotent;
    options.limit = &limit;
    options.budget = &budget;
    options.observer = &events;
  }

  asio::io_context io;
  coretry::testing::manual_runner runner{io};
  coretry::concurrency_limit limit;
  counting_budget budget;
  limit_events events;
  coretry::retry_options options;
  std::vector<std::optional<coretry::outcome<int>>> results;
  std::vector<coretry::duration> completed_at;

  template <class Factory, class Token>
  void start_with(const coretry::policy& p, Factory factory, Token&& bind) {
    const std::size_t i = results.size();
    results.emplace_back();
    completed_at.emplace_back();
    coretry::async_retry<manual_timer>(io.get_executor(), p, options, factory, status_classifier{},
                                       bind([this, i](std::exception_ptr e, coretry::outcome<int> r) {
                                         REQUIRE_FALSE(e);
                                         completed_at[i] = runner.elapsed();
                                         results[i] = std::move(r);
                                       }));
  }
  template <class Factory>
  void start(const coretry::policy& p, Factory factory) {
    start_with(p, factory, [](auto&& h) { return std::forward<decltype(h)>(h); });
  }
};

/// One permit: an operation that holds it 20 ms, then one started behind
/// it that the caller can cancel (`signal`). Both are started from outside
/// the context, so each first step is queued.
struct one_waiting_behind_slow {
  limited_run t{fixed_limit(1, 50ms)};
  fake_dependency slow{{{20ms}}};
  fake_dependency waiting{{{1ms}}};
  asio::cancellation_signal signal;
  one_waiting_behind_slow() {
    t.start(limited_policy(), slow.factory());
    t.start_with(limited_policy(), waiting.factory(),
                 [&](auto&& h) { return asio::bind_cancellation_slot(signal.slot(), std::forward<decltype(h)>(h)); });
  }
};

} // namespace

TEST_CASE("limit engine: an attempt with no permit free waits for one, and starts when it is given back") {
  limited_run t(fixed_limit(1));
  fake_dependency slow({{3ms}});
  fake_dependency other({{10ms}});
  t.start(limited_policy(), slow.factory());
  t.start(limited_policy(), other.factory());
  t.runner.run_for(1ms);
  CHECK(t.limit.in_flight() == 1);
  CHECK(t.limit.waiting() == 1);
  CHECK(other.calls == 0);
  t.runner.run();
  REQUIRE(t.results[1]);
  CHECK(t.results[1]->reason == stop_reason::succeeded);
  // The permit went straight from the first attempt's end to the waiter.
  CHECK(other.started_at == std::vector<coretry::duration>{3ms});
  CHECK(t.results[1]->records.at(0).start == 3ms);
  CHECK(t.results[1]->records.at(0).kind == coretry::attempt_kind::first);
  CHECK(t.completed_at[1] == 13ms);
  REQUIRE(t.events.waits.size() == 1);
  CHECK(t.events.waits[0].granted);
  CHECK(t.events.waits[0].at == 0ms);
  CHECK(t.events.waits[0].waited == 3ms);
  CHECK(t.limit.in_flight() == 0);
  CHECK(t.limit.waiting() == 0);
  CHECK(t.budget.initial == 2);
}

TEST_CASE("limit engine: a wait that ends without a permit stops at its bound, touching nothing") {
  limited_run t(fixed_limit(1, 5ms));
  coretry::local_gate gate(coretry::test::small_gate(1));
  t.options.gate = &gate;
  fake_dependency slow({{20ms}});
  fake_dependency refused({{1ms}});
  t.start(limited_policy(), slow.factory());
  t.start(limited_policy(), refused.factory());
  t.runner.run();
  REQUIRE(t.results[1]);
  CHECK(t.results[1]->reason == stop_reason::concurrency_limited);
  CHECK(t.completed_at[1] == 5ms);
  CHECK(t.results[1]->attempts == 0);
  CHECK(t.results[1]->records.empty());
  CHECK(refused.calls == 0);
  // The refused operation deposited nothing in the budget and told the gate nothing.
  CHECK(t.budget.initial == 1);
  CHECK(gate.recorded().requests == 1);
  REQUIRE(t.events.waits.size() == 1);
  CHECK_FALSE(t.events.waits[0].granted);
  CHECK(t.events.waits[0].waited == 5ms);
  CHECK(t.limit.in_flight() == 0);
  CHECK(t.limit.waiting() == 0);
}

TEST_CASE("limit engine: with the queue full, or no wait allowed, the refusal is immediate") {
  SUBCASE("no wait allowed") {
    limited_run t(fixed_limit(1, 0ms));
    fake_dependency slow({{20ms}});
    fake_dependency refused({{1ms}});
    t.start(limited_policy(), slow.factory());
    t.start(limited_policy(), refused.factory());
    t.runner.run();
    CHECK(t.results[1]->reason == stop_reason::concurrency_limited);
    CHECK(t.completed_at[1] == 0ms);
    CHECK(t.events.waits.empty());
    CHECK(t.limit.totals().refused == 1); // counted, though the limit was never asked to queue it
  }
  SUBCASE("queue full") {
    limited_run t(fixed_limit(1, 5ms, 1));
    fake_dependency slow({{20ms}});
    fake_dependency waits({{1ms}});
    fake_dependency refused({{1ms}});
    t.start(limited_policy(), slow.factory());
    t.start(limited_policy(), waits.factory());
    t.start(limited_policy(), refused.factory());
    t.runner.run();
    CHECK(t.results[2]->reason == stop_reason::concurrency_limited);
    CHECK(t.completed_at[2] == 0ms);
    CHECK(t.results[1]->reason == stop_reason::concurrency_limited);
    CHECK(t.completed_at[1] == 5ms);
  }
}

TEST_CASE("limit engine: a retry that finds no permit stops without taking a budget token") {
  limited_run t(fixed_limit(1, 0ms));
  // The first operation fails at 5 ms and would retry at 15 ms; the second
  // starts at 10 ms and holds the only permit until 40 ms.
  fake_dependency failing({{5ms, {}, 503}, {5ms}});
  fake_dependency holder({{30ms}});
  t.start(limited_policy(), failing.factory());
  t.runner.run_for(10ms);
  t.start(limited_policy(), holder.factory());
  t.runner.run();
  REQUIRE(t.results[0]);
  CHECK(t.results[0]->reason == stop_reason::concurrency_limited);
  CHECK(t.completed_at[0] == 15ms);
  CHECK(t.results[0]->attempts == 1);
  CHECK(failing.calls == 1);
  CHECK(t.budget.retries == 0);
  CHECK(t.results[1]->reason == stop_reason::succeeded);
}

TEST_CASE("limit engine: a permit is held until a cancelled attempt's operation has completed") {
  limited_run t(fixed_limit(1, 50ms));
  t.options.cancellation_repeat = 0ms;
  coretry::policy p = limited_policy();
  p.max_attempts = 1;
  p.attempt_limit = 10ms;
  p.min_attempt_allowance = 5ms;
  fake_dependency next({{1ms}});
  // An attempt that ignores its cancellation until 12 ms after its 10 ms limit.
  t.start(p, [&](context) { return deaf_call(t.io, 22ms); });
  t.start(limited_policy(), next.factory());
  t.runner.run_for(15ms);
  CHECK(t.limit.in_flight() == 1); // the first attempt has timed out, but its operation runs on
  CHECK(next.calls == 0);
  t.runner.run();
  CHECK(next.started_at == std::vector<coretry::duration>{22ms});
  CHECK(t.results[0]->reason == stop_reason::attempts_exhausted);
  CHECK(t.results[1]->reason == stop_reason::succeeded);
  CHECK(t.limit.in_flight() == 0);
}

TEST_CASE("limit engine: the caller's cancellation ends a wait for a permit at once") {
  one_waiting_behind_slow run;
  auto& [t, slow, waiting, signal] = run;
  t.runner.run_for(4ms);
  CHECK(t.limit.waiting() == 1);
  signal.emit(asio::cancellation_type::terminal);
  t.runner.run_for(1ms);
  REQUIRE(t.results[1]);
  CHECK(t.results[1]->reason == stop_reason::cancelled);
  CHECK(t.completed_at[1] == 4ms);
  CHECK(t.limit.waiting() == 0);
  CHECK(waiting.calls == 0);
  t.runner.run();
  CHECK(t.limit.in_flight() == 0);
}

TEST_CASE("limit engine: the caller's cancellation before the first step, with no permit free, stops without waiting") {
  // The second operation's first answer is a wait for a permit, not begun
  // yet when the cancellation comes.
  one_waiting_behind_slow run;
  auto& [t, slow, waiting, signal] = run;
  signal.emit(asio::cancellation_type::terminal);
  t.runner.run_for(1ms);
  REQUIRE(t.results[1]);
  CHECK(t.results[1]->reason == stop_reason::cancelled);
  CHECK(t.results[1]->attempts == 0);
  CHECK(t.completed_at[1] == 0ms);
  CHECK(t.limit.waiting() == 0);
  CHECK(waiting.calls == 0);
  t.runner.run();
  REQUIRE(t.results[0]);
  CHECK(t.results[0]->reason == stop_reason::succeeded);
  CHECK(t.limit.in_flight() == 0);
}

TEST_CASE("limit engine: a hedge is sent only on a spare permit, and never waits for one") {
  limited_run t(fixed_limit(1, 50ms));
  coretry::policy p = limited_policy();
  p.hedging.max_hedges = 1;
  p.hedging.delay = 5ms;
  fake_dependency slow({{20ms}});
  t.start(p, slow.factory());
  t.runner.run();
  CHECK(t.results[0]->reason == stop_reason::succeeded);
  CHECK(slow.calls == 1);
  CHECK(t.events.hedges == std::vector<coretry::hedge_result>{coretry::hedge_result::refused_limit});
  CHECK(t.events.waits.empty());
  CHECK(t.budget.retries == 0);

  // With two permits the hedge goes, and each attempt gives its own back.
  limited_run two(fixed_limit(2, 50ms));
  fake_dependency slower({{20ms}});
  two.start(p, slower.factory());
  two.runner.run_for(6ms);
  CHECK(two.limit.in_flight() == 2);
  two.runner.run();
  CHECK(slower.calls == 2);
  CHECK(two.limit.in_flight() == 0);
}

TEST_CASE("limit engine: an operation waiting for a permit when its context is destroyed leaves the queue") {
  coretry::concurrency_limit limit(fixed_limit(1, 50ms));
  auto token = std::make_shared<int>(0);
  {
    asio::io_context io;
    coretry::testing::manual_runner runner{io};
    coretry::retry_options o = idempotent();
    o.limit = &limit;
    fake_dependency slow({{20ms}});
    fake_dependency waiting({{1ms}});
    coretry::async_retry<manual_timer>(io.get_executor(), limited_policy(), o, slow.factory(), status_classifier{},
                                       [token](std::exception_ptr, coretry::outcome<int>) { FAIL("ran"); });
    coretry::async_retry<manual_timer>(io.get_executor(), limited_policy(), o, waiting.factory(),
                                       status_classifier{},
                                       [token](std::exception_ptr, coretry::outcome<int>) { FAIL("ran"); });
    runner.run_for(2ms);
    CHECK(limit.waiting() == 1);
    CHECK(limit.in_flight() == 1);
  }
  CHECK(limit.waiting() == 0);
  CHECK(limit.in_flight() == 0);
  CHECK(token.use_count() == 1);
}

TEST_CASE("limit engine: an operation destroyed before its first step gives back the permit it was given") {
  coretry::concurrency_limit limit(fixed_limit(1, 0ms));
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    asio::io_context io;
    coretry::retry_options o = idempotent();
    o.limit = &limit;
    fake_dependency never({{1ms}});
    // Started from outside the context: the first attempt is a step queued
    // on the operation's strand, with its permit already taken.
    coretry::async_retry<manual_timer>(io.get_executor(), limited_policy(), o, never.factory(), status_classifier{},
                                       [](std::exception_ptr, coretry::outcome<int>) { FAIL("ran"); });
    CHECK(limit.in_flight() == 1);
  } // destroyed unrun
  CHECK(limit.in_flight() == 0);
  // And the limit still admits: a later operation gets its permit.
  limited_run t(fixed_limit(1, 0ms));
  fake_dependency once({{1ms}});
  t.options.limit = &limit;
  t.start(limited_policy(), once.factory());
  t.runner.run();
  CHECK(t.results[0]->reason == stop_reason::succeeded);
}
