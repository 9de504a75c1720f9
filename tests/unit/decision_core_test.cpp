// The pure decision core alone: no Asio, no clock, scripted randomness.

#include <coretry/decision_core.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <doctest/doctest.h>

#include <set>

using namespace std::chrono_literals;
using coretry::decision;
using coretry::duration;
using coretry::stop_reason;
using coretry::verdict;

namespace {

const verdict timed_out = verdict::transient("timeout");
constexpr auto idempotent = coretry::repeat_safety::idempotent;

duration ms(std::int64_t n) { return std::chrono::milliseconds(n); }

/// The end of an attempt classified as `v` at `elapsed`, with
/// `still_running` others not ended (attempt_finished's event).
decision finished(coretry::decision_core& core, duration elapsed, const verdict& v,
                  coretry::repeat_safety safety = idempotent, unsigned still_running = 0) {
  coretry::attempt_end e;
  e.elapsed = elapsed;
  e.still_running = still_running;
  e.classified = v;
  return core.attempt_finished(e, safety);
}

} // namespace

TEST_CASE("core: the worked example, step by step") {
  coretry::testing::scripted_random draws{0.4, 0.7};
  coretry::decision_core core(coretry::policy{}, draws);
  decision d = core.begin();
  REQUIRE(d.what == decision::action::start_attempt);
  CHECK(d.allowance == ms(250));
  d = finished(core, ms(250), timed_out, idempotent);
  REQUIRE(d.what == decision::action::sleep);
  CHECK(d.wait == ms(40));
  CHECK(d.source == coretry::wait_source::local);
  d = core.sleep_finished(ms(290));
  REQUIRE(d.what == decision::action::start_attempt);
  CHECK(d.allowance == ms(250));
  d = finished(core, ms(540), timed_out, idempotent);
  REQUIRE(d.what == decision::action::sleep);
  CHECK(d.wait == ms(140));
  d = core.sleep_finished(ms(680));
  REQUIRE(d.what == decision::action::start_attempt);
  CHECK(d.allowance == ms(250));
  d = finished(core, ms(890), verdict::success(), idempotent);
  CHECK(d.what == decision::action::stop);
  CHECK(d.reason == stop_reason::succeeded);
  CHECK(core.attempts() == 3);
}

TEST_CASE("core: the allowance is min(attempt limit, remaining - reserve)") {
  coretry::testing::scripted_random draws{};
  coretry::decision_core core(coretry::policy{}, draws);
  core.begin();
  // After a sleep ending at 730 ms: 1000 - 730 - 50 = 220 ms.
  CHECK(core.sleep_finished(ms(730)).allowance == ms(220));
  // At 851 ms only 99 ms would remain: below the 100 ms minimum.
  const decision late = core.sleep_finished(ms(851));
  CHECK(late.what == decision::action::stop);
  CHECK(late.reason == stop_reason::deadline_exhausted);
}

TEST_CASE("core: a local wait that would leave no useful attempt stops before sleeping") {
  coretry::policy p;
  p.backoff.jitter = coretry::jitter_kind::none;
  coretry::testing::scripted_random draws{};
  coretry::decision_core core(p, draws);
  core.begin();
  // At 760 ms: usable 190, minus the 100 ms minimum allows at most a 90 ms wait; the window is 100.
  const decision d = finished(core, ms(760), timed_out, idempotent);
  CHECK(d.what == decision::action::stop);
  CHECK(d.reason == stop_reason::deadline_exhausted);
}

TEST_CASE("core: server delay") {
  coretry::policy p;
  p.overall_deadline = 10s;
  SUBCASE("a delay that does not fit stops as server delay too long, before any sleep") {
    p.server_delay_spread = 0ms;
    coretry::testing::scripted_random draws{0.5};
    coretry::decision_core core(p, draws);
    core.begin();
    // At 100 ms of 10 s: 9850 ms usable, minus the 100 ms minimum attempt
    // and the 5 ms kept back for a late timer.
    const decision fits = finished(core, ms(100), verdict::transient("http_503", coretry::delivery::answered,
                                                                            ms(9745)), idempotent);
    CHECK(fits.what == decision::action::sleep);
    coretry::testing::scripted_random more{0.5};
    coretry::decision_core again(p, more);
    again.begin();
    const decision d = finished(again, ms(100), verdict::transient("http_503", coretry::delivery::answered,
                                                                          ms(9746)), idempotent);
    CHECK(d.what == decision::action::stop);
    CHECK(d.reason == stop_reason::server_delay_too_long);
  }
  SUBCASE("the local cap never truncates the server's delay") {
    p.backoff.max_window = 200ms;
    p.server_delay_spread = 0ms;
    coretry::testing::scripted_random draws{1.0};
    coretry::decision_core core(p, draws);
    core.begin();
    const decision d = finished(core, ms(100), verdict::transient("http_429", coretry::delivery::answered, 3s),
                                             idempotent);
    REQUIRE(d.what == decision::action::sleep);
    CHECK(d.wait == 3s);
    CHECK(d.source == coretry::wait_source::server);
  }
  SUBCASE("local backoff larger than the server's delay wins, plus the spread") {
    p.server_delay_spread = 10ms;
    coretry::testing::scripted_random draws{1.0, 1.0};
    coretry::decision_core core(p, draws);
    core.begin();
    const decision d = finished(core, ms(100), verdict::transient("http_503", coretry::delivery::answered, 0s),
                                             idempotent);
    REQUIRE(d.what == decision::action::sleep);
    CHECK(d.wait == ms(100) + ms(10));
    CHECK(d.source == coretry::wait_source::local);
  }
  SUBCASE("an enormous delay stops, it never wraps to a short wait") {
    coretry::testing::scripted_random draws{0.5};
    coretry::decision_core core(p, draws);
    core.begin();
    const decision d = finished(core,
        ms(100), verdict::transient("http_503", coretry::delivery::answered, duration::max()), idempotent);
    CHECK(d.reason == stop_reason::server_delay_too_long);
  }
  SUBCASE("with no overall deadline a huge delay saturates instead of overflowing") {
    p.overall_deadline = duration::max();
    p.server_delay_spread = 100ms;
    coretry::testing::scripted_random draws{0.5, 1.0};
    coretry::decision_core core(p, draws);
    core.begin();
    const decision d = finished(core,
        ms(100), verdict::transient("http_503", coretry::delivery::answered, duration::max() - 1ns), idempotent);
    REQUIRE(d.what == decision::action::sleep);
    CHECK(d.wait == duration::max());
  }
}

TEST_CASE("core: eligibility needs both a safe repeat and a transient failure") {
  coretry::testing::scripted_random draws{0.5, 0.5, 0.5};
  auto finish = [&](const verdict& v, coretry::repeat_safety safety) {
    coretry::decision_core core(coretry::policy{}, draws);
    core.begin();
    return finished(core, ms(10), v, safety);
  };
  constexpr auto unsafe = coretry::repeat_safety::unsafe;
  CHECK(finish(verdict::permanent("http_404"), idempotent).reason == stop_reason::rejected);
  CHECK(finish(timed_out, unsafe).reason == stop_reason::outcome_unknown);
  CHECK(finish(verdict::transient("http_503", coretry::delivery::answered), unsafe).reason == stop_reason::rejected);
  CHECK(finish(verdict::transient("refused", coretry::delivery::never_sent), unsafe).what == decision::action::sleep);
  CHECK(finish(timed_out, coretry::repeat_safety::idempotency_key).what == decision::action::sleep);
  CHECK(finish(timed_out, idempotent).what == decision::action::sleep);
}

TEST_CASE("core: jitter kinds draw from the right range") {
  coretry::policy p;
  p.overall_deadline = duration::max();
  p.max_attempts = 10;
  p.backoff.initial_window = 100ms;
  p.backoff.max_window = 1s;
  auto first_two_waits = [&](coretry::jitter_kind kind, std::initializer_list<double> fractions) {
    p.backoff.jitter = kind;
    coretry::testing::scripted_random draws(fractions);
    coretry::decision_core core(p, draws);
    core.begin();
    const duration a = finished(core, ms(1), timed_out, idempotent).wait;
    core.sleep_finished(ms(2));
    const duration b = finished(core, ms(3), timed_out, idempotent).wait;
    return std::pair{a, b};
  };
  CHECK(first_two_waits(coretry::jitter_kind::none, {}) == std::pair{ms(100), ms(200)});
  CHECK(first_two_waits(coretry::jitter_kind::full, {0.0, 1.0}) == std::pair{ms(0), ms(200)});
  CHECK(first_two_waits(coretry::jitter_kind::full, {0.9, 0.1}) == std::pair{ms(90), ms(20)});
  // Equal: half the window, plus up to the other half.
  CHECK(first_two_waits(coretry::jitter_kind::equal, {0.0, 1.0}) == std::pair{ms(50), ms(200)});
  // Decorrelated: uniform in [initial, 3 x previous]; the first previous is the initial window.
  CHECK(first_two_waits(coretry::jitter_kind::decorrelated, {0.5, 1.0}) == std::pair{ms(200), ms(600)});
}

TEST_CASE("core: the cap limits the window, not the attempts") {
  coretry::policy p;
  p.overall_deadline = duration::max();
  p.max_attempts = 8;
  p.backoff.jitter = coretry::jitter_kind::none;
  p.backoff.max_window = 250ms;
  coretry::testing::scripted_random draws{};
  coretry::decision_core core(p, draws);
  core.begin();
  std::vector<duration> waits;
  duration now = 0ms;
  for (;;) {
    now += 1ms;
    const decision d = finished(core, now, timed_out, idempotent);
    if (d.what == decision::action::stop) {
      CHECK(d.reason == stop_reason::attempts_exhausted);
      break;
    }
    waits.push_back(d.wait);
    now += d.wait;
    REQUIRE(core.sleep_finished(now).what == decision::action::start_attempt);
  }
  CHECK(core.attempts() == 8);
  CHECK(waits == std::vector<duration>{ms(100), ms(200), ms(250), ms(250), ms(250), ms(250), ms(250)});
  CHECK(coretry::backoff_window(p.backoff, 1'000'000) == ms(250)); // no overflow however far
}

TEST_CASE("core: a floor keeps the local wait from being shorter") {
  coretry::policy p;
  p.backoff.floor = 30ms;
  coretry::testing::scripted_random draws{0.1};
  coretry::decision_core core(p, draws);
  core.begin();
  CHECK(finished(core, ms(10), timed_out, idempotent).wait == ms(30));
}

TEST_CASE("core: the budget is asked only for retries, after the deadline check") {
  coretry::token_bucket_budget budget({.capacity = 1, .tokens_per_initial_request = 0});
  coretry::testing::scripted_random draws{0.5, 0.5};
  coretry::decision_core core(coretry::policy{}, draws, &budget);
  core.begin();
  CHECK(budget.tokens() == 1.0);
  finished(core, ms(10), timed_out, idempotent);
  // Too late for an attempt: stops on the deadline and keeps the token.
  CHECK(core.sleep_finished(ms(900)).reason == stop_reason::deadline_exhausted);
  CHECK(budget.tokens() == 1.0);
  CHECK(core.sleep_finished(ms(100)).what == decision::action::start_attempt);
  CHECK(budget.tokens() == 0.0);
  // No token left: it stops at once instead of sleeping first.
  CHECK(finished(core, ms(120), timed_out, idempotent).reason == stop_reason::budget_exhausted);
}

TEST_CASE("core: a token taken by others during the sleep stops the retry after it") {
  coretry::token_bucket_budget budget({.capacity = 1, .tokens_per_initial_request = 0});
  coretry::testing::scripted_random draws{0.5};
  coretry::decision_core core(coretry::policy{}, draws, &budget);
  core.begin();
  CHECK(finished(core, ms(10), timed_out, idempotent).what == decision::action::sleep); // a token is there
  CHECK(budget.try_acquire_retry());                                                 // another operation takes it
  CHECK(core.sleep_finished(ms(100)).reason == stop_reason::budget_exhausted);
}

TEST_CASE("core: invalid policies are refused with a message naming the field") {
  coretry::testing::scripted_random draws{};
  auto refused = [&](auto mutate, const char* field) {
    coretry::policy p;
    mutate(p);
    CHECK_THROWS_WITH_AS(coretry::decision_core(p, draws), doctest::Contains(field), std::invalid_argument);
  };
  refused([](auto& p) { p.max_attempts = 0; }, "max_attempts");
  refused([](auto& p) { p.overall_deadline = -1ms; }, "overall_deadline");
  refused([](auto& p) { p.attempt_limit = 0ms; }, "attempt_limit");
  refused([](auto& p) { p.min_attempt_allowance = 300ms; }, "min_attempt_allowance");
  refused([](auto& p) { p.completion_reserve = 950ms; }, "completion_reserve");
  // A reserve so large that adding it to the allowance would wrap negative.
  refused([](auto& p) { p.completion_reserve = duration::max(); }, "completion_reserve");
  refused([](auto& p) { p.backoff.multiplier = 0.5; }, "multiplier");
  refused([](auto& p) { p.backoff.max_window = 1ms; }, "max_window");
  refused([](auto& p) { p.server_delay_spread = -1ms; }, "server_delay_spread");
}

TEST_CASE("core: an attempt's end while others run follows the same rules: a stop winds them down, a failure hedges at once") {
  using hedge = coretry::hedge_decision::action;
  coretry::testing::scripted_random draws{};
  coretry::policy p;
  p.max_attempts = 4;
  p.hedging.max_hedges = 1;
  p.hedging.delay = ms(50);
  coretry::decision_core core(p, draws);
  REQUIRE(core.begin().what == decision::action::start_attempt);
  // The hedge is due 50 ms after the first attempt started.
  coretry::hedge_decision h = core.next_hedge(ms(10), 1);
  CHECK(h.what == hedge::wait);
  CHECK(h.at == ms(50));
  REQUIRE(core.next_hedge(ms(50), 1).what == hedge::send);
  // The first fails while the hedge runs: the next hedge is due at once.
  decision d = finished(core, ms(60), timed_out, idempotent, 1);
  CHECK(d.what == decision::action::hedge);
  CHECK_FALSE(core.stopping());
  h = core.next_hedge(ms(60), 1);
  REQUIRE(h.what == hedge::send);
  CHECK(h.allowance == ms(250));
  CHECK(core.attempts() == 3);
  // Sent: the one after it waits for its delay again.
  h = core.next_hedge(ms(60), 1);
  CHECK(h.what == hedge::wait);
  CHECK(h.at == ms(110));
  // A success while another runs: the others wind down, the stop is kept,
  // and no hedge follows.
  d = finished(core, ms(70), verdict::success(), idempotent, 1);
  CHECK(d.what == decision::action::wind_down);
  CHECK(d.reason == stop_reason::succeeded);
  CHECK(core.stopping() == stop_reason::succeeded);
  CHECK(core.next_hedge(ms(110), 1).what == hedge::none);
}

TEST_CASE("core: a permanent failure, an unrepeatable one and the caller's cancellation while others run") {
  coretry::testing::scripted_random draws{};
  coretry::policy p;
  p.hedging.max_hedges = 2;
  {
    coretry::decision_core core(p, draws);
    core.begin();
    const decision d = finished(core, ms(20), verdict::permanent("refused"), idempotent, 2);
    CHECK(d.what == decision::action::wind_down);
    CHECK(d.reason == stop_reason::rejected);
    CHECK(core.stopping() == stop_reason::rejected);
  }
  {
    coretry::decision_core core(p, draws);
    core.begin();
    const decision d = finished(core, ms(20), verdict::transient("reset", coretry::delivery::unknown),
                                             coretry::repeat_safety::unsafe, 1);
    CHECK(d.what == decision::action::wind_down);
    CHECK(d.reason == stop_reason::outcome_unknown);
  }
  {
    coretry::decision_core core(p, draws);
    core.begin();
    // An attempt the caller's cancellation ended, while another runs: it
    // counts as cancelled, and the others have been told already: nothing
    // to do but wait; the last one's end is the stop.
    coretry::attempt_end e;
    e.elapsed = ms(20);
    e.still_running = 1;
    e.caller_cancelled = true;
    e.classified = timed_out;
    decision d = core.attempt_finished(e, idempotent);
    CHECK(d.what == decision::action::none);
    CHECK(e.abandoned);
    CHECK(e.classified.category == "cancelled");
    CHECK(e.classified.status == coretry::attempt_status::permanent);
    CHECK(core.stopping() == stop_reason::cancelled);
    e.still_running = 0;
    d = core.attempt_abandoned(e);
    CHECK(d.what == decision::action::stop);
    CHECK(d.reason == stop_reason::cancelled);
  }
  {
    // The last attempt running: the retry rules, as without hedging.
    coretry::testing::scripted_random backoff_draws{0.5};
    coretry::decision_core core(p, backoff_draws);
    core.begin();
    const decision d = finished(core, ms(20), timed_out, idempotent, 0);
    CHECK(d.what == decision::action::sleep);
    CHECK_FALSE(core.stopping());
  }
}

namespace {

/// Admits every retry and hedge as a probe; knows which tickets are out.
struct core_ticket_gate final : coretry::retry_gate {
  std::uint64_t next = 1;
  std::set<std::uint64_t> open;
  void record(coretry::attempt_status, duration) noexcept override {}
  coretry::gate_decision ask(duration, duration, const coretry::gate_decision*) noexcept override {
    open.insert(next);
    return coretry::gate_decision::admit_probe(next++);
  }
  void probe_ended(std::uint64_t ticket) noexcept override { open.erase(ticket); }
};

/// A fixed limit of `permits`, with room to wait 5 ms.
coretry::concurrency_limit::options fixed_permits(unsigned permits) {
  coretry::concurrency_limit::options o;
  o.adaptive = false;
  o.initial_limit = permits;
  o.max_wait = ms(5);
  o.max_waiters = 4;
  return o;
}

/// The end of an attempt at `elapsed`, `still_running` others not ended,
/// carrying `probe`.
coretry::attempt_end end_at(duration elapsed, unsigned still_running = 0, std::uint64_t probe = 0) {
  coretry::attempt_end e;
  e.elapsed = elapsed;
  e.still_running = still_running;
  e.probe = probe;
  return e;
}

/// A core whose policy sends one hedge 50 ms after an attempt starts: its
/// first attempt started, and the hedge sent at 50 ms (two running).
struct one_hedge_sent {
  coretry::testing::scripted_random draws{};
  coretry::policy p = [] {
    coretry::policy q;
    q.hedging.max_hedges = 1;
    q.hedging.delay = ms(50);
    return q;
  }();
  coretry::decision_core core{p, draws};
  one_hedge_sent() {
    REQUIRE(core.begin().what == decision::action::start_attempt);
    REQUIRE(core.next_hedge(ms(50), 1).what == coretry::hedge_decision::action::send);
  }
};

} // namespace

TEST_CASE("core: the caller's cancellation while attempts run winds them down, and the first to end decides") {
  using hedge = coretry::hedge_decision::action;
  one_hedge_sent run;
  coretry::decision_core& core = run.core;
  decision d = core.caller_cancelled(ms(60), 2);
  CHECK(d.what == decision::action::wind_down);
  CHECK(d.reason == stop_reason::cancelled);
  CHECK(core.cancelled());
  CHECK_FALSE(core.stopping()); // not decided: an attempt that succeeds stands
  CHECK(core.next_hedge(ms(200), 1).what == hedge::none); // due by then, but cancelled
  SUBCASE("a success stands") {
    d = finished(core, ms(70), verdict::success(), idempotent, 1);
    CHECK(d.what == decision::action::wind_down);
    CHECK(d.reason == stop_reason::succeeded);
    CHECK(core.stopping() == stop_reason::succeeded);
    // Told again once decided: the attempts still running are sent the
    // cancellation again, and the stop decided stands.
    d = core.caller_cancelled(ms(71), 1);
    CHECK(d.what == decision::action::wind_down);
    CHECK(d.reason == stop_reason::succeeded);
    d = core.attempt_abandoned(end_at(ms(80)));
    CHECK(d.what == decision::action::stop);
    CHECK(d.reason == stop_reason::succeeded);
  }
  SUBCASE("a failure counts as cancelled, whatever its verdict") {
    coretry::attempt_end e = end_at(ms(70), 1);
    e.classified = verdict::transient("reset", coretry::delivery::never_sent);
    d = core.attempt_finished(e, idempotent);
    CHECK(d.what == decision::action::none);
    CHECK(e.abandoned);
    CHECK(e.classified.category == "cancelled");
    CHECK(e.classified.delivered == coretry::delivery::unknown);
    CHECK(core.stopping() == stop_reason::cancelled);
    // The caller's cancellation told after that end: the others are still
    // sent it.
    CHECK(core.caller_cancelled(ms(75), 1).what == decision::action::wind_down);
    d = core.attempt_abandoned(end_at(ms(80)));
    CHECK(d.what == decision::action::stop);
    CHECK(d.reason == stop_reason::cancelled);
  }
}

TEST_CASE("core: an attempt's end that saw the caller's cancellation before the core was told of it") {
  one_hedge_sent run;
  coretry::decision_core& core = run.core;
  coretry::attempt_end e = end_at(ms(60), 1);
  e.caller_cancelled = true;
  e.classified = timed_out;
  decision d = core.attempt_finished(e, idempotent);
  CHECK(d.what == decision::action::none);
  CHECK(e.abandoned);
  CHECK(core.stopping() == stop_reason::cancelled);
  // The event itself comes next: the hedge still running is sent the
  // cancellation (else it would run on to its deadline).
  d = core.caller_cancelled(ms(61), 1);
  CHECK(d.what == decision::action::wind_down);
  CHECK(d.reason == stop_reason::cancelled);
}

TEST_CASE("core: the caller's cancellation with no attempt running is a stop, and a permit held for an attempt not started goes back") {
  coretry::testing::scripted_random draws{0.5};
  SUBCASE("between the first decision and the first attempt") {
    coretry::concurrency_limit limit(fixed_permits(2));
    coretry::decision_core core(coretry::policy{}, draws, nullptr, nullptr, &limit);
    REQUIRE(core.begin().what == decision::action::start_attempt);
    CHECK(limit.in_flight() == 1);
    const decision d = core.caller_cancelled(ms(0), 0);
    CHECK(d.what == decision::action::stop);
    CHECK(d.reason == stop_reason::cancelled);
    CHECK(limit.in_flight() == 0);
  }
  SUBCASE("asleep in the backoff: the sleep's end is a stop too") {
    coretry::decision_core core(coretry::policy{}, draws);
    core.begin();
    REQUIRE(finished(core, ms(250), timed_out).what == decision::action::sleep);
    decision d = core.caller_cancelled(ms(260), 0);
    CHECK(d.what == decision::action::stop);
    CHECK(d.reason == stop_reason::cancelled);
    d = core.sleep_finished(ms(300));
    CHECK(d.what == decision::action::stop);
    CHECK(d.reason == stop_reason::cancelled);
    CHECK(core.attempts() == 1);
  }
}

TEST_CASE("core: a wait for a permit is the core's until it ends, and the caller's cancellation meanwhile is answered by its end") {
  coretry::testing::scripted_random draws{};
  coretry::concurrency_limit limit(fixed_permits(1));
  REQUIRE(limit.try_acquire()); // another operation's
  coretry::decision_core core(coretry::policy{}, draws, nullptr, nullptr, &limit);
  decision d = core.begin();
  REQUIRE(d.what == decision::action::wait_permit);
  CHECK(d.wait == ms(5));
  CHECK(core.waiting_for_permit());
  SUBCASE("granted after the cancellation: a stop, and the permit goes back") {
    CHECK(core.caller_cancelled(ms(1), 0).what == decision::action::none);
    CHECK(core.waiting_for_permit());
    limit.release(ms(2), ms(2), coretry::limit_signal::ignored);
    REQUIRE(limit.try_acquire()); // the permit handed to the waiter
    d = core.permit_granted(ms(2));
    CHECK(d.what == decision::action::stop);
    CHECK(d.reason == stop_reason::cancelled);
    CHECK_FALSE(core.waiting_for_permit());
    CHECK(limit.in_flight() == 0);
    CHECK(core.attempts() == 0);
  }
  SUBCASE("refused after the cancellation: a stop, cancelled") {
    core.caller_cancelled(ms(1), 0);
    d = core.permit_refused();
    CHECK(d.what == decision::action::stop);
    CHECK(d.reason == stop_reason::cancelled);
    CHECK_FALSE(core.waiting_for_permit());
  }
  SUBCASE("refused: concurrency limited") {
    d = core.permit_refused();
    CHECK(d.what == decision::action::stop);
    CHECK(d.reason == stop_reason::concurrency_limited);
    CHECK_FALSE(core.waiting_for_permit());
  }
  SUBCASE("granted: the attempt starts with it, and its end gives it back") {
    limit.release(ms(2), ms(2), coretry::limit_signal::ignored);
    REQUIRE(limit.try_acquire());
    d = core.permit_granted(ms(2));
    REQUIRE(d.what == decision::action::start_attempt);
    CHECK_FALSE(core.waiting_for_permit());
    core.attempt_started();
    CHECK(limit.in_flight() == 1);
    coretry::attempt_end e = end_at(ms(40));
    e.started = ms(2);
    e.classified = verdict::success();
    CHECK(core.attempt_finished(e, idempotent).reason == stop_reason::succeeded);
    CHECK(limit.in_flight() == 0);
  }
}

TEST_CASE("core: a probe ticket goes out with the attempt's start and comes back with its end") {
  coretry::testing::scripted_random draws{0.5};
  core_ticket_gate gate;
  coretry::decision_core core(coretry::policy{}, draws, nullptr, &gate);
  REQUIRE(core.begin().what == decision::action::start_attempt);
  REQUIRE(finished(core, ms(250), timed_out).what == decision::action::sleep);
  const decision d = core.sleep_finished(ms(300));
  REQUIRE(d.what == decision::action::start_attempt);
  CHECK(d.probe == 1);
  CHECK(gate.open == std::set<std::uint64_t>{1});
  coretry::attempt_end e = end_at(ms(350), 0, d.probe);
  SUBCASE("finished") {
    e.classified = verdict::success();
    core.attempt_finished(e, idempotent);
  }
  SUBCASE("abandoned") { core.attempt_abandoned(e); }
  SUBCASE("threw") { core.attempt_threw(e); }
  SUBCASE("cancelled") {
    e.caller_cancelled = true;
    e.classified = timed_out;
    // Nothing else runs: the caller's cancellation is the stop.
    const decision stop = core.attempt_finished(e, idempotent);
    CHECK(stop.what == decision::action::stop);
    CHECK(stop.reason == stop_reason::cancelled);
    CHECK(e.abandoned);
  }
  CHECK(gate.open.empty());
}

TEST_CASE("core: user code that threw ends the operation, and what its attempt held goes back") {
  using hedge = coretry::hedge_decision::action;
  coretry::testing::scripted_random draws{};
  coretry::concurrency_limit limit(fixed_permits(4));
  coretry::policy p;
  p.hedging.max_hedges = 1;
  p.hedging.delay = ms(50);
  coretry::decision_core core(p, draws, nullptr, nullptr, &limit);
  REQUIRE(core.begin().what == decision::action::start_attempt);
  SUBCASE("the first attempt's factory: a stop, its permit back") {
    const decision d = core.attempt_threw(end_at(ms(0)));
    CHECK(d.what == decision::action::stop);
    CHECK(d.reason == stop_reason::rejected);
    CHECK(limit.in_flight() == 0);
  }
  SUBCASE("an attempt while a hedge runs: the hedge wound down, the stop once it ends") {
    core.attempt_started();
    REQUIRE(core.next_hedge(ms(50), 1).what == hedge::send);
    core.attempt_started();
    CHECK(limit.in_flight() == 2);
    decision d = core.attempt_threw(end_at(ms(60), 1));
    CHECK(d.what == decision::action::wind_down);
    CHECK(core.stopping() == stop_reason::rejected);
    CHECK(limit.in_flight() == 1);
    CHECK(core.next_hedge(ms(200), 1).what == hedge::none);
    d = core.attempt_abandoned(end_at(ms(70)));
    CHECK(d.what == decision::action::stop);
    CHECK(d.reason == stop_reason::rejected);
    CHECK(limit.in_flight() == 0);
  }
}

TEST_CASE("core: what an attempt's end tells the concurrency limit: a timeout with the whole attempt limit is a drop, one cut short or cancelled is not") {
  // An adaptive limit that judges a window of one end: a drop recorded in
  // the window lowers the limit when the next end closes it; an end the
  // limit is not told of leaves the window open and the limit as it was.
  coretry::concurrency_limit::options o;
  o.initial_limit = 20;
  o.window = ms(1);
  o.min_window_samples = 1;
  coretry::concurrency_limit limit(o);
  REQUIRE(limit.try_acquire()); // the first end opens the first window (to 1 ms)
  limit.release(ms(0), ms(1), coretry::limit_signal::ignored);
  coretry::testing::scripted_random draws{0.5};
  coretry::decision_core core(coretry::policy{}, draws, nullptr, nullptr, &limit);
  REQUIRE(core.begin().what == decision::action::start_attempt);
  core.attempt_started();
  REQUIRE(limit.in_flight() == 1);
  coretry::attempt_end e = end_at(ms(250));
  e.timed_out = true;
  e.classified = timed_out;
  unsigned expected = 20;
  SUBCASE("its own deadline, with the whole attempt limit: a drop") {
    e.allowance = ms(250);
    core.attempt_finished(e, idempotent);
    expected = 18;
  }
  SUBCASE("the overall deadline, with less than the attempt limit: not told") {
    e.allowance = ms(200);
    core.attempt_finished(e, idempotent);
  }
  SUBCASE("ended by the caller's cancellation: not told") {
    e.allowance = ms(250);
    e.caller_cancelled = true;
    core.attempt_finished(e, idempotent);
    CHECK(e.abandoned);
  }
  CHECK(limit.in_flight() == 0);
  REQUIRE(limit.try_acquire()); // the next end closes the window if it holds an end
  limit.release(ms(260), ms(1), coretry::limit_signal::ignored);
  CHECK(limit.limit() == expected);
}
