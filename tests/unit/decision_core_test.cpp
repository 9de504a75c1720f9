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

} // namespace

TEST_CASE("core: the worked example, step by step") {
  coretry::testing::scripted_random draws{0.4, 0.7};
  coretry::decision_core core(coretry::policy{}, draws);
  decision d = core.begin();
  REQUIRE(d.what == decision::action::start_attempt);
  CHECK(d.allowance == ms(250));
  d = core.attempt_finished(ms(250), timed_out, idempotent);
  REQUIRE(d.what == decision::action::sleep);
  CHECK(d.wait == ms(40));
  CHECK(d.source == coretry::wait_source::local);
  d = core.sleep_finished(ms(290));
  REQUIRE(d.what == decision::action::start_attempt);
  CHECK(d.allowance == ms(250));
  d = core.attempt_finished(ms(540), timed_out, idempotent);
  REQUIRE(d.what == decision::action::sleep);
  CHECK(d.wait == ms(140));
  d = core.sleep_finished(ms(680));
  REQUIRE(d.what == decision::action::start_attempt);
  CHECK(d.allowance == ms(250));
  d = core.attempt_finished(ms(890), verdict::success(), idempotent);
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
  const decision d = core.attempt_finished(ms(760), timed_out, idempotent);
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
    const decision fits = core.attempt_finished(ms(100), verdict::transient("http_503", coretry::delivery::answered,
                                                                            ms(9745)), idempotent);
    CHECK(fits.what == decision::action::sleep);
    coretry::testing::scripted_random more{0.5};
    coretry::decision_core again(p, more);
    again.begin();
    const decision d = again.attempt_finished(ms(100), verdict::transient("http_503", coretry::delivery::answered,
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
    const decision d = core.attempt_finished(ms(100), verdict::transient("http_429", coretry::delivery::answered, 3s),
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
    const decision d = core.attempt_finished(ms(100), verdict::transient("http_503", coretry::delivery::answered, 0s),
                                             idempotent);
    REQUIRE(d.what == decision::action::sleep);
    CHECK(d.wait == ms(100) + ms(10));
    CHECK(d.source == coretry::wait_source::local);
  }
  SUBCASE("an enormous delay stops, it never wraps to a short wait") {
    coretry::testing::scripted_random draws{0.5};
    coretry::decision_core core(p, draws);
    core.begin();
    const decision d = core.attempt_finished(
        ms(100), verdict::transient("http_503", coretry::delivery::answered, duration::max()), idempotent);
    CHECK(d.reason == stop_reason::server_delay_too_long);
  }
  SUBCASE("with no overall deadline a huge delay saturates instead of overflowing") {
    p.overall_deadline = duration::max();
    p.server_delay_spread = 100ms;
    coretry::testing::scripted_random draws{0.5, 1.0};
    coretry::decision_core core(p, draws);
    core.begin();
    const decision d = core.attempt_finished(
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
    return core.attempt_finished(ms(10), v, safety);
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
    const duration a = core.attempt_finished(ms(1), timed_out, idempotent).wait;
    core.sleep_finished(ms(2));
    const duration b = core.attempt_finished(ms(3), timed_out, idempotent).wait;
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
    const decision d = core.attempt_finished(now, timed_out, idempotent);
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
  CHECK(core.attempt_finished(ms(10), timed_out, idempotent).wait == ms(30));
}

TEST_CASE("core: the budget is asked only for retries, after the deadline check") {
  coretry::token_bucket_budget budget({.capacity = 1, .tokens_per_initial_request = 0});
  coretry::testing::scripted_random draws{0.5, 0.5};
  coretry::decision_core core(coretry::policy{}, draws, &budget);
  core.begin();
  CHECK(budget.tokens() == 1.0);
  core.attempt_finished(ms(10), timed_out, idempotent);
  // Too late for an attempt: stops on the deadline and keeps the token.
  CHECK(core.sleep_finished(ms(900)).reason == stop_reason::deadline_exhausted);
  CHECK(budget.tokens() == 1.0);
  CHECK(core.sleep_finished(ms(100)).what == decision::action::start_attempt);
  CHECK(budget.tokens() == 0.0);
  // No token left: it stops at once instead of sleeping first.
  CHECK(core.attempt_finished(ms(120), timed_out, idempotent).reason == stop_reason::budget_exhausted);
}

TEST_CASE("core: a token taken by others during the sleep stops the retry after it") {
  coretry::token_bucket_budget budget({.capacity = 1, .tokens_per_initial_request = 0});
  coretry::testing::scripted_random draws{0.5};
  coretry::decision_core core(coretry::policy{}, draws, &budget);
  core.begin();
  CHECK(core.attempt_finished(ms(10), timed_out, idempotent).what == decision::action::sleep); // a token is there
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
  decision d = core.attempt_finished(ms(60), timed_out, idempotent, 1);
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
  d = core.attempt_finished(ms(70), verdict::success(), idempotent, 1);
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
    const decision d = core.attempt_finished(ms(20), verdict::permanent("refused"), idempotent, 2);
    CHECK(d.what == decision::action::wind_down);
    CHECK(d.reason == stop_reason::rejected);
    CHECK(core.stopping() == stop_reason::rejected);
  }
  {
    coretry::decision_core core(p, draws);
    core.begin();
    const decision d = core.attempt_finished(ms(20), verdict::transient("reset", coretry::delivery::unknown),
                                             coretry::repeat_safety::unsafe, 1);
    CHECK(d.what == decision::action::wind_down);
    CHECK(d.reason == stop_reason::outcome_unknown);
  }
  {
    coretry::decision_core core(p, draws);
    core.begin();
    // The others have been told of the cancellation: nothing to do but wait.
    decision d = core.attempt_cancelled(1);
    CHECK(d.what == decision::action::none);
    CHECK(core.stopping() == stop_reason::cancelled);
    d = core.attempt_cancelled(0);
    CHECK(d.what == decision::action::stop);
    CHECK(d.reason == stop_reason::cancelled);
  }
  {
    // The last attempt running: the retry rules, as without hedging.
    coretry::testing::scripted_random backoff_draws{0.5};
    coretry::decision_core core(p, backoff_draws);
    core.begin();
    const decision d = core.attempt_finished(ms(20), timed_out, idempotent, 0);
    CHECK(d.what == decision::action::sleep);
    CHECK_FALSE(core.stopping());
  }
}
