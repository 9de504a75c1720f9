// The retry gate in the asynchronous layer, on virtual time: when each
// operation held by the gate is admitted, exactly.

#include "test_support.hpp"

#include <policies.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

using namespace coretry_tests;
using coretry::stop_reason;
using coretry::wait_source;

namespace {

/// A dependency that answers 503 after 10 ms to every call started before
/// `recovers_at`, and 200 to every later one.
struct recovering_dependency {
  explicit recovering_dependency(coretry::duration recovers) : recovers_at(recovers) {}
  coretry::duration recovers_at;
  int calls = 0;

  asio::awaitable<int> call() {
    ++calls;
    manual_timer work(co_await asio::this_coro::executor);
    const coretry::duration start = work.now().time_since_epoch();
    work.expires_after(10ms);
    co_await work.async_wait(asio::use_awaitable);
    co_return start < recovers_at ? 503 : 200;
  }
  auto factory() {
    return [this](context) { return call(); };
  }
};

/// Attempts of 10 ms, a fixed 10 ms backoff, up to 10 attempts in 2 s.
coretry::policy gated_policy() {
  coretry::policy p;
  p.max_attempts = 10;
  p.overall_deadline = 2s;
  p.backoff.jitter = coretry::jitter_kind::none;
  p.backoff.initial_window = 10ms;
  p.backoff.multiplier = 1.0;
  p.backoff.max_window = 10ms;
  p.server_delay_spread = coretry::duration::zero();
  return p;
}

/// A gate that closes on four failures, probes every 100 ms and opens after
/// two successful steps. It promises slots far ahead, so that each held
/// retry has its own slot from its first question (the default promises
/// only the next slot; "gate engine: held retries ask again ..." covers that).
coretry::local_gate::options gate_options() {
  coretry::local_gate::options o = coretry::test::small_gate(1);
  o.min_requests = 4;
  o.step_successes = 1;
  o.fallback_failures = 1;
  o.slots_ahead = 1000;
  return o;
}

struct gated_run {
  asio::io_context io;
  coretry::testing::manual_runner runner{io};
  coretry::local_gate gate{gate_options()};
  coretry::testing::scripted_random draws{};
  coretry::retry_options options;
  std::vector<std::optional<coretry::outcome<int>>> results;
  std::vector<coretry::duration> completed_at;

  gated_run() {
    options.safety = coretry::repeat_safety::idempotent;
    options.random = &draws;
    options.gate = &gate;
  }

  template <class Factory>
  void start(const coretry::policy& p, Factory factory, status_classifier classify = {}) {
    const std::size_t i = results.size();
    results.emplace_back();
    completed_at.emplace_back();
    coretry::async_retry<manual_timer>(io.get_executor(), p, options, factory, classify,
                                       [this, i](std::exception_ptr e, coretry::outcome<int> r) {
                                         REQUIRE_FALSE(e);
                                         completed_at[i] = runner.elapsed();
                                         results[i] = std::move(r);
                                       });
  }

  std::vector<coretry::duration> starts(std::size_t i) const {
    std::vector<coretry::duration> out;
    for (const auto& record : results.at(i)->records) out.push_back(record.start);
    return out;
  }
};

/// Closes `gate` at time zero and takes the slots at 0, 100 and 200 ms (the
/// first a probe that ends at once): the next retry to ask gets 300 ms.
void close_and_take_three_slots(coretry::retry_gate& gate) {
  for (int i = 0; i < 10; ++i) gate.record(coretry::attempt_status::transient, 0ms);
  for (int i = 0; i < 3; ++i) {
    const coretry::gate_decision d = gate.ask(0ms, coretry::duration::max(), nullptr);
    if (d.what == coretry::gate_decision::action::admit) gate.probe_ended(d.ticket);
  }
}

} // namespace

TEST_CASE("gate engine: an outage then recovery admits held operations one slot at a time") {
  gated_run t;
  recovering_dependency dependency{500ms};
  for (int i = 0; i < 4; ++i) t.start(gated_policy(), dependency.factory());
  t.runner.run();
  // All four fail at 10 ms: the fourth failure closes the gate (next slot
  // 10 ms). At 20 ms the first asks and is the probe; the others are held
  // until 120, 220 and 320 ms. Each failed probe asks again 10 ms after it
  // and gets the next free slot. The probe at 520 ms is the first to meet
  // the recovered dependency: one success steps the rate up, the next
  // (620 ms) opens the gate; those still held keep their slots.
  using v = std::vector<coretry::duration>;
  CHECK(t.starts(0) == v{0ms, 20ms, 420ms, 820ms});
  CHECK(t.starts(1) == v{0ms, 120ms, 520ms});
  CHECK(t.starts(2) == v{0ms, 220ms, 620ms});
  CHECK(t.starts(3) == v{0ms, 320ms, 720ms});
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(t.results[i]->reason == stop_reason::succeeded);
    CHECK(t.completed_at[i] == t.starts(i).back() + 10ms);
  }
  // A held retry's record shows the whole wait and that the gate ended it.
  CHECK(t.results[1]->records[1].wait_before == 110ms);
  CHECK(t.results[1]->records[1].wait_from == wait_source::gate);
  CHECK(t.results[0]->records[1].wait_from == wait_source::local);
  CHECK(t.gate.is_open());
  CHECK(dependency.calls == 13);

  // Once open, a new operation's retries are not held.
  recovering_dependency down_again{10s};
  coretry::policy three = gated_policy();
  three.max_attempts = 2;
  t.start(three, down_again.factory());
  t.runner.run();
  CHECK(t.results[4]->reason == stop_reason::attempts_exhausted);
  CHECK(t.results[4]->records[1].wait_before == 10ms);
}

TEST_CASE("gate engine: an operation never waits for a slot past its last useful instant") {
  gated_run t;
  recovering_dependency dependency{10s};
  coretry::policy p = gated_policy();
  p.overall_deadline = 400ms; // the last useful start: 400 - 50 - 100 - 5 = 245 ms
  for (int i = 0; i < 4; ++i) t.start(p, dependency.factory());
  t.runner.run();
  // Slots at 20 (admitted), 120 and 220 ms; the fourth's would be 320: no slot, stop at once.
  using v = std::vector<coretry::duration>;
  CHECK(t.starts(0) == v{0ms, 20ms});
  CHECK(t.starts(1) == v{0ms, 120ms});
  CHECK(t.starts(2) == v{0ms, 220ms});
  CHECK(t.starts(3) == v{0ms});
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(t.results[i]->reason == stop_reason::dependency_unhealthy);
  }
  // Each stops when it asks (10 ms after its failed attempt), never later.
  CHECK(t.completed_at == std::vector<coretry::duration>{40ms, 140ms, 240ms, 20ms});
  // A slot too late for its retry was never reserved: the next is still 320 ms.
  const coretry::gate_decision next = t.gate.ask(250ms, coretry::duration::max(), nullptr);
  CHECK(next.what == coretry::gate_decision::action::wait);
  CHECK(next.at == 320ms);
  CHECK(coretry::to_string(stop_reason::dependency_unhealthy) == "dependency_unhealthy");
  CHECK(coretry::to_string(wait_source::gate) == "gate");
  // For an outer retrying layer, an inner unhealthy stop is transient, as a budget's is.
  CHECK(coretry::classify_outcome(stop_reason::dependency_unhealthy).status == coretry::attempt_status::transient);
  CHECK(coretry::make_error_code(stop_reason::dependency_unhealthy).message().find("unhealthy") !=
        std::string::npos);
}

namespace {

/// Another implementation of the interface: answers every question with `answer`
/// (a wait is `wait_for` from the question's instant) and counts the results.
struct fixed_gate final : coretry::retry_gate {
  coretry::gate_decision::action answer;
  coretry::duration wait_for{};
  int results = 0;
  std::vector<coretry::duration> asked_at;
  void record(coretry::attempt_status, coretry::duration) noexcept override { ++results; }
  coretry::gate_decision ask(coretry::duration now, coretry::duration,
                             const coretry::gate_decision*) noexcept override {
    asked_at.push_back(now);
    if (answer == coretry::gate_decision::action::wait) return coretry::gate_decision::wait_until(now + wait_for, 1);
    return answer == coretry::gate_decision::action::deny ? coretry::gate_decision::deny()
                                                          : coretry::gate_decision::admit();
  }
};

} // namespace

TEST_CASE("gate engine: any gate's deny, or a wait past the last useful instant, stops the operation") {
  for (auto [answer, wait_for] : {std::pair{coretry::gate_decision::action::deny, coretry::duration::zero()},
                                  std::pair{coretry::gate_decision::action::wait, coretry::duration(1s)}}) {
    CAPTURE(static_cast<int>(answer));
    gated_run t;
    fixed_gate gate;
    gate.answer = answer;
    gate.wait_for = wait_for;
    t.options.gate = &gate;
    recovering_dependency dependency{10s};
    coretry::policy p = gated_policy();
    p.overall_deadline = 400ms;
    t.start(p, dependency.factory());
    t.runner.run();
    // Asked at 20 ms; 1020 ms is past the last useful start (245 ms): no sleep.
    CHECK(t.results[0]->reason == stop_reason::dependency_unhealthy);
    CHECK(t.completed_at[0] == 20ms);
    CHECK(gate.asked_at == std::vector<coretry::duration>{20ms});
    CHECK(gate.results == 1);
    CHECK(dependency.calls == 1);
  }
}

TEST_CASE("gate engine: a held retry takes no budget token, and the bucket still stops retries") {
  gated_run t;
  coretry::token_bucket_budget budget({.capacity = 2, .tokens_per_initial_request = 0});
  t.options.budget = &budget;
  recovering_dependency dependency{10s};
  t.gate.record(coretry::attempt_status::transient, 0ms); // with the three failures at 10 ms: closed
  for (int i = 0; i < 3; ++i) t.start(gated_policy(), dependency.factory());
  t.runner.run_until(manual_clock::time_point(60ms));
  // The first retry (20 ms) took a token; the two held ones have not.
  CHECK(budget.tokens() == 1.0);
  t.runner.run();
  // The first is held again after its failed retry, until 320 ms, and finds
  // the bucket empty then: the second token went at 120 ms to the second
  // operation, admitted by the gate.
  CHECK(t.results[0]->reason == stop_reason::budget_exhausted);
  CHECK(t.starts(0) == std::vector<coretry::duration>{0ms, 20ms});
  CHECK(t.completed_at[0] == 320ms);
  CHECK(t.results[1]->reason == stop_reason::budget_exhausted);
  CHECK(t.starts(1) == std::vector<coretry::duration>{0ms, 120ms});
  CHECK(t.completed_at[1] == 130ms);
  // The third reaches its slot at 220 ms and finds the bucket empty.
  CHECK(t.results[2]->reason == stop_reason::budget_exhausted);
  CHECK(t.results[2]->attempts == 1);
  CHECK(t.completed_at[2] == 220ms);
  CHECK(budget.tokens() == 0.0);
}

TEST_CASE("gate engine: a server's delay stays a minimum, the gate's slot can make it longer") {
  gated_run t;
  close_and_take_three_slots(t.gate);
  fake_dependency dependency{{{10ms, {}, 503}, {10ms}}};
  SUBCASE("slot after the server's delay") {
    t.start(gated_policy(), dependency.factory(), status_classifier{150ms});
    t.runner.run();
    // 503 at 10 ms, Retry-After 150 ms: asks at 160 ms, held until its slot at 300 ms.
    CHECK(t.starts(0) == std::vector<coretry::duration>{0ms, 300ms});
    CHECK(t.results[0]->records[1].wait_before == 290ms);
    CHECK(t.results[0]->records[1].wait_from == wait_source::gate);
    CHECK(t.results[0]->reason == stop_reason::succeeded);
  }
  SUBCASE("server's delay after the slot") {
    t.start(gated_policy(), dependency.factory(), status_classifier{500ms});
    t.runner.run();
    // Asks at 510 ms: the next slot (300 ms) is past, so it goes at once.
    CHECK(t.starts(0) == std::vector<coretry::duration>{0ms, 510ms});
    CHECK(t.results[0]->records[1].wait_before == 500ms);
    CHECK(t.results[0]->records[1].wait_from == wait_source::server);
  }
}

TEST_CASE("gate engine: cancellation while held is prompt and leaves nothing in the gate") {
  gated_run t;
  close_and_take_three_slots(t.gate);
  recovering_dependency dependency{10s};
  asio::cancellation_signal cancel;
  std::optional<coretry::outcome<int>> result;
  coretry::duration at{};
  coretry::async_retry<manual_timer>(t.io.get_executor(), gated_policy(), t.options, dependency.factory(),
                                     status_classifier{},
                                     asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr, auto r) {
                                       at = t.runner.elapsed();
                                       result = std::move(r);
                                     }));
  t.runner.run_until(manual_clock::time_point(200ms)); // held from 20 ms until its slot at 300 ms
  REQUIRE_FALSE(result);
  cancel.emit(asio::cancellation_type::terminal);
  t.runner.run();
  REQUIRE(result);
  CHECK(result->reason == stop_reason::cancelled);
  CHECK(at == 200ms);
  CHECK(t.runner.elapsed() == 200ms); // no timer was left to run to 300 ms
  CHECK(dependency.calls == 1);
  // The gate holds no waiter: the abandoned slot is simply unused, and the
  // next retry to ask gets the slot after it.
  const coretry::gate_decision next = t.gate.ask(200ms, coretry::duration::max(), nullptr);
  CHECK(next.what == coretry::gate_decision::action::wait);
  CHECK(next.at == 400ms);
}

TEST_CASE("gate engine: a throttled first attempt stops the operation before it sends anything") {
  gated_run t;
  auto o = gate_options();
  o.throttle_first_attempts = true;
  coretry::local_gate throttling(o);
  for (int i = 0; i < 4; ++i) throttling.record(coretry::attempt_status::transient, 0ms); // p = 4/5
  t.options.gate = &throttling;
  coretry::testing::scripted_random draws{0.5, 0.9};
  t.options.random = &draws;
  recovering_dependency dependency{0ms};
  t.start(gated_policy(), dependency.factory()); // draw 0.5 < 0.8: rejected
  t.start(gated_policy(), dependency.factory()); // draw 0.9: sent
  t.runner.run();
  CHECK(t.results[0]->reason == stop_reason::dependency_unhealthy);
  CHECK(t.results[0]->attempts == 0);
  CHECK(t.results[0]->records.empty());
  CHECK(t.completed_at[0] == 0ms);
  CHECK(t.results[1]->reason == stop_reason::succeeded);
  CHECK(dependency.calls == 1);
  CHECK(throttling.counts().throttled == 1);
}

namespace {

/// A dependency that takes 250 ms to fail every call.
struct slow_dependency {
  int calls = 0;
  asio::awaitable<int> call() {
    ++calls;
    manual_timer work(co_await asio::this_coro::executor);
    work.expires_after(250ms);
    co_await work.async_wait(asio::use_awaitable);
    co_return 503;
  }
  auto factory() {
    return [this](context) { return call(); };
  }
};

} // namespace

TEST_CASE("gate engine: a slow dependency gets one probe at a time") {
  gated_run t;
  auto o = gate_options();
  o.slots_ahead = 1; // the default
  coretry::local_gate gate(o);
  for (int i = 0; i < 4; ++i) gate.record(coretry::attempt_status::transient, 0ms); // closed at 0
  t.options.gate = &gate;
  slow_dependency dependency;
  coretry::policy p = gated_policy();
  p.attempt_limit = 1s;
  p.overall_deadline = 3s;
  for (int i = 0; i < 5; ++i) t.start(p, dependency.factory());
  t.runner.run();
  // Every retry was a probe; none started while another was out, so they
  // follow one another, each at least 250 ms after the last began.
  std::vector<std::pair<coretry::duration, coretry::duration>> probes;
  for (const auto& r : t.results)
    for (std::size_t a = 1; a < r->records.size(); ++a) probes.emplace_back(r->records[a].start, r->records[a].end);
  std::sort(probes.begin(), probes.end());
  REQUIRE(probes.size() >= 5);
  for (std::size_t i = 1; i < probes.size(); ++i) {
    CAPTURE(i);
    CHECK(probes[i].first >= probes[i - 1].second);
  }
  // At one per 100 ms they would have been about 27 in the 2.7 s; one at a
  // time they are at most one per 250 ms.
  CHECK(probes.size() <= 11);
  // Each ends held by the gate or out of time, never by attempts.
  for (const auto& r : t.results)
    CHECK((r->reason == stop_reason::dependency_unhealthy || r->reason == stop_reason::deadline_exhausted));
}

TEST_CASE("gate engine: a probe whose operation is cancelled ends, and the next goes at once") {
  gated_run t;
  auto o = gate_options();
  o.slots_ahead = 1;
  coretry::local_gate gate(o);
  for (int i = 0; i < 4; ++i) gate.record(coretry::attempt_status::transient, 0ms);
  t.options.gate = &gate;
  slow_dependency dependency;
  asio::cancellation_signal cancel;
  std::optional<coretry::outcome<int>> result;
  coretry::policy p = gated_policy();
  p.attempt_limit = 1s;
  coretry::async_retry<manual_timer>(t.io.get_executor(), p, t.options, dependency.factory(), status_classifier{},
                                     asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr, auto r) {
                                       result = std::move(r);
                                     }));
  t.runner.run_until(manual_clock::time_point(300ms)); // failed at 250, probe admitted at 260 ms
  REQUIRE(dependency.calls == 2);
  cancel.emit(asio::cancellation_type::terminal);
  t.runner.run();
  REQUIRE(result);
  CHECK(result->reason == stop_reason::cancelled);
  CHECK(t.runner.elapsed() == 300ms);
  // The cancelled probe no longer holds the next one back: 200 ms later
  // (well within the probe timeout of 1 s) a retry is admitted at once.
  CHECK(gate.ask(500ms, coretry::duration::max(), nullptr).what == coretry::gate_decision::action::admit);
}

TEST_CASE("gate engine: a retry the bucket cannot pay for is neither held nor given a slot") {
  gated_run t;
  coretry::token_bucket_budget budget({.capacity = 1, .tokens_per_initial_request = 0});
  t.options.budget = &budget;
  recovering_dependency dependency{10s};
  t.gate.record(coretry::attempt_status::transient, 0ms); // with the failures at 10 ms: closed
  for (int i = 0; i < 4; ++i) t.start(gated_policy(), dependency.factory());
  t.runner.run();
  // At 20 ms the first takes the probe and the only token; the others find
  // the bucket empty and stop at once, holding no slot.
  CHECK(t.results[0]->reason == stop_reason::budget_exhausted); // after its retry, at 30 ms
  CHECK(t.completed_at[0] == 30ms);
  for (std::size_t i = 1; i < 4; ++i) {
    CAPTURE(i);
    CHECK(t.results[i]->reason == stop_reason::budget_exhausted);
    CHECK(t.completed_at[i] == 20ms);
  }
  CHECK(t.gate.counts().held == 0);
  // The slot after the probe's is still free.
  const coretry::gate_decision next = t.gate.ask(30ms, coretry::duration::max(), nullptr);
  CHECK(next.what == coretry::gate_decision::action::wait);
  CHECK(next.at == 120ms);
}
