// Asio's composed-operation contract, probed from outside: the handler's
// executor and allocator, cancellation at every moment, re-entrant
// completion, io_context destruction, timer lateness and stuck attempts.

#include "test_support.hpp"
#include "test_operations.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <optional>

using namespace coretry_tests;
using coretry::stop_reason;

namespace {

/// Counts live copies of itself: a handler that holds one shows whether the
/// handler was destroyed.
struct lifetime_probe {
  explicit lifetime_probe(std::shared_ptr<int> live) : live_(std::move(live)) { ++*live_; }
  lifetime_probe(const lifetime_probe& other) : live_(other.live_) { ++*live_; }
  lifetime_probe(lifetime_probe&& other) noexcept : live_(other.live_) { ++*live_; }
  ~lifetime_probe() { --*live_; }
  std::shared_ptr<int> live_;
};

/// An attempt that completes only through its cancellation handler, and does
/// so inline (dispatch to the operation's strand, where the signal is
/// emitted): a legal operation that re-enters the retry from inside emit().
/// With `answer` set it answers that status at once (posted) instead.
auto completes_inside_cancellation(std::optional<int> answer = std::nullopt) {
  return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code, int)>(
      [answer](auto handler) {
        if (answer) {
          auto ex = asio::get_associated_executor(handler);
          return asio::post(ex, asio::append(std::move(handler), boost::system::error_code(), *answer));
        }
        auto slot = asio::get_associated_cancellation_slot(handler);
        REQUIRE(slot.is_connected());
        auto owned = std::make_shared<std::optional<decltype(handler)>>(std::move(handler));
        slot.assign([owned](asio::cancellation_type) {
          if (!owned->has_value()) return;
          auto h = std::move(**owned);
          owned->reset();
          auto ex = asio::get_associated_executor(h);
          asio::dispatch(ex, asio::append(std::move(h), asio::error::operation_aborted, 0));
        });
      },
      asio::deferred);
}

/// An attempt that ignores cancellation and never completes by itself; the
/// test keeps its handler and lets it go at the end.
template <class Keep>
auto never_completes(Keep& keep) {
  return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code, int)>(
      [&keep](auto handler) { keep.emplace(std::move(handler)); }, asio::deferred);
}


struct recording_observer final : coretry::retry_observer {
  void attempt_stuck(const coretry::stuck_attempt_event& e) noexcept override {
    ++stuck;
    stuck_at = e.at;
    stuck_attempt = e.attempt;
  }
  int stuck = 0;
  unsigned stuck_attempt = 0;
  coretry::duration stuck_at{};
};

/// Starts an operation on `dep` with `options` on an io_context of its own,
/// runs it for 50 ms of virtual time (one call made, the operation pending)
/// and destroys the io_context: checks that this destroyed the operation and
/// its handler, which never ran.
void check_destroyed_with_io_context(fake_dependency& dep, const coretry::retry_options& options) {
  auto live = std::make_shared<int>(0);
  bool called = false;
  {
    asio::io_context io;
    coretry::testing::manual_runner runner(io);
    coretry::async_retry<manual_timer>(io.get_executor(), coretry::policy{}, options, dep.factory(),
                                       status_classifier{},
                                       [&called, probe = lifetime_probe(live)](std::exception_ptr,
                                                                               coretry::outcome<int>) {
                                         called = true;
                                       });
    runner.run_for(50ms);
    CHECK(dep.calls == 1);
    CHECK(*live == 1);
  }
  CHECK(*live == 0);
  CHECK_FALSE(called);
}

} // namespace

TEST_CASE("contract: a cancellation emitted before the first step means no attempt") {
  // A context made for several threads: the operation gets a strand of its
  // own, so its first step is queued, not run inside the call.
  asio::io_context io(2);
  coretry::testing::manual_runner runner(io);
  fake_dependency dep({{200ms}});
  asio::cancellation_signal cancel;
  std::optional<coretry::outcome<int>> result;
  coretry::async_retry<manual_timer>(io.get_executor(), coretry::policy{}, idempotent(), dep.factory(),
                                     status_classifier{},
                                     asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr,
                                                                                    coretry::outcome<int> r) {
                                       result = std::move(r);
                                     }));
  cancel.emit(asio::cancellation_type::terminal);
  runner.run();
  REQUIRE(result);
  CHECK(result->reason == stop_reason::cancelled);
  CHECK(result->attempts == 0);
  CHECK(dep.calls == 0);
  CHECK(runner.elapsed() == 0ms);
}

TEST_CASE("contract: destroying the io_context destroys the pending operation and its handler") {
  SUBCASE("during an attempt") {
    fake_dependency dep({{200ms}});
    check_destroyed_with_io_context(dep, idempotent());
  }
  SUBCASE("during a backoff sleep") {
    fake_dependency dep({{10ms, {}, 503}});
    coretry::testing::scripted_random draws{1.0, 1.0};
    coretry::retry_options o = idempotent();
    o.random = &draws;
    check_destroyed_with_io_context(dep, o); // failed at 10 ms, sleeping until 110 ms
  }
}

TEST_CASE("contract: an attempt that completes inside its own cancellation handler") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  coretry::policy p;
  std::optional<coretry::outcome<int>> result;
  int calls = 0;
  int attempts = 0;
  SUBCASE("on the deadline path the retry goes on, nobody cancelled it") {
    auto factory = [&](const context&) {
      ++attempts;
      return completes_inside_cancellation(attempts == 1 ? std::nullopt : std::optional<int>(200));
    };
    coretry::testing::scripted_random draws{0.0};
    coretry::retry_options o = idempotent();
    o.random = &draws;
    coretry::async_retry<manual_timer>(io.get_executor(), p, o, factory, status_classifier{},
                                       [&](std::exception_ptr e, coretry::outcome<int> r) {
                                         CHECK_FALSE(e);
                                         ++calls;
                                         result = std::move(r);
                                       });
    runner.run();
    REQUIRE(result);
    CHECK(calls == 1);
    CHECK(result->reason == stop_reason::succeeded);
    CHECK(result->attempts == 2);
    CHECK(result->records[0].error == coretry::attempt_error::timed_out);
    CHECK(result->records[0].end == 250ms);
    CHECK(result->records[1].start == 250ms);
  }
  SUBCASE("on the caller's cancellation path the operation stops once, as cancelled") {
    asio::cancellation_signal cancel;
    auto factory = [&](const context&) {
      ++attempts;
      return completes_inside_cancellation();
    };
    coretry::async_retry<manual_timer>(io.get_executor(), p, idempotent(), factory, status_classifier{},
                                       asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e,
                                                                                       coretry::outcome<int> r) {
                                         CHECK_FALSE(e);
                                         ++calls;
                                         result = std::move(r);
                                       }));
    runner.run_for(30ms);
    cancel.emit(asio::cancellation_type::terminal);
    runner.run();
    REQUIRE(result);
    CHECK(calls == 1);
    CHECK(attempts == 1);
    CHECK(result->reason == stop_reason::cancelled);
    CHECK(runner.elapsed() == 30ms);
  }
}

/// A 200 ms attempt whose caller emits `emissions` at 20 ms, in that order.
struct emitted_at_20ms {
  explicit emitted_at_20ms(std::initializer_list<asio::cancellation_type> emissions) {
    asio::io_context io;
    coretry::testing::manual_runner runner(io);
    fake_dependency dep({{200ms}});
    asio::cancellation_signal cancel;
    coretry::async_retry<manual_timer>(io.get_executor(), coretry::policy{}, idempotent(), dep.factory(),
                                       status_classifier{},
                                       asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr,
                                                                                      coretry::outcome<int> r) {
                                         result = std::move(r);
                                         completed_at = runner.elapsed();
                                       }));
    runner.run_for(20ms);
    for (auto type : emissions) cancel.emit(type);
    runner.run();
    calls = dep.calls;
  }
  std::optional<coretry::outcome<int>> result;
  coretry::duration completed_at{};
  int calls = 0;
};

TEST_CASE("contract: a later total cancellation never turns a terminal one into a retry") {
  const emitted_at_20ms run{asio::cancellation_type::terminal, asio::cancellation_type::total};
  REQUIRE(run.result);
  CHECK(run.result->reason == stop_reason::cancelled);
  CHECK(run.calls == 1);
  CHECK(run.completed_at == 20ms);
}

TEST_CASE("contract: total cancellation alone is not supported and is ignored") {
  const emitted_at_20ms run{asio::cancellation_type::total};
  REQUIRE(run.result);
  CHECK(run.result->reason == stop_reason::succeeded);
  CHECK(run.completed_at == 200ms);
}

// Default policy; attempt 1 answers 503 at 100 ms with a 700 ms server
// delay; the largest spread draw. The plan sleeps to 845 ms, the last
// instant that leaves the 100 ms minimum plus the 5 ms timer slack: a timer
// up to 5 ms late still starts attempt 2, a later one stops the operation
// as deadline_exhausted after its sleep.
TEST_CASE("contract: a wait planned to the edge of the deadline survives a late timer up to the slack") {
  for (int late_ms = 0; late_ms <= 8; ++late_ms) {
    CAPTURE(late_ms);
    asio::io_context io;
    coretry::testing::manual_runner runner(io);
    runner.set_lateness(std::chrono::milliseconds(late_ms));
    fake_dependency dep({{100ms, {}, 503}, {50ms, {}, 200}});
    coretry::testing::scripted_random draws{0.0, 1.0};
    coretry::retry_options o = idempotent();
    o.random = &draws;
    std::optional<coretry::outcome<int>> result;
    coretry::async_retry<manual_timer>(io.get_executor(), coretry::policy{}, o, dep.factory(),
                                       status_classifier{ms(700)},
                                       [&](std::exception_ptr, coretry::outcome<int> r) { result = std::move(r); });
    runner.run();
    REQUIRE(result);
    REQUIRE(result->records.size() >= 1);
    CHECK(result->records[0].end == ms(100 + late_ms));
    // The planned wait ends 5 ms before the last useful instant.
    CHECK(result->total_backoff == ms(745 - late_ms));
    if (late_ms <= 5) {
      CHECK(result->reason == stop_reason::succeeded);
      REQUIRE(result->records.size() == 2);
      CHECK(result->records[1].allowance >= 100ms);
    } else {
      CHECK(result->reason == stop_reason::deadline_exhausted);
      CHECK(result->records.size() == 1);
    }
  }
}

TEST_CASE("contract: the same edge wait on a real steady_timer still leads to an attempt") {
  asio::io_context io;
  asio::steady_timer first(io);
  int attempts = 0;
  auto factory = [&](const coretry::attempt_context<std::chrono::steady_clock>&) {
    ++attempts;
    first.expires_after(attempts == 1 ? std::chrono::milliseconds(100) : std::chrono::milliseconds(10));
    const int status = attempts == 1 ? 503 : 200;
    return first.async_wait(asio::deferred) |
           asio::deferred([status](boost::system::error_code ec) { return asio::deferred.values(ec, status); });
  };
  coretry::testing::scripted_random draws{0.0, 1.0};
  coretry::retry_options o = idempotent();
  o.random = &draws;
  std::optional<coretry::outcome<int>> result;
  coretry::async_retry(io.get_executor(), coretry::policy{}, o, factory, status_classifier{ms(700)},
                       [&](std::exception_ptr e, coretry::outcome<int> r) {
                         CHECK_FALSE(e);
                         result = std::move(r);
                       });
  io.run();
  REQUIRE(result);
  // A real timer fires a little late; how late depends on the machine, so
  // this only asserts what the slack promises when that lateness is within it.
  const auto late = result->records.size() == 2 ? result->records[1].start - ms(845) : coretry::duration::max();
  if (late <= 5ms) {
    CHECK(result->reason == stop_reason::succeeded);
    CHECK(result->records.size() == 2);
  } else {
    MESSAGE("this machine's timer fired more than 5 ms late; outcome " << coretry::to_string(result->reason));
  }
}

TEST_CASE("contract: an attempt that ignores cancellation is reported stuck and the runner sees a deadlock") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  recording_observer observer;
  coretry::retry_options o = idempotent();
  o.observer = &observer;
  std::optional<asio::any_completion_handler<void(boost::system::error_code, int)>> kept;
  bool called = false;
  {
    auto factory = [&](const context&) { return never_completes(kept); };
    coretry::async_retry<manual_timer>(io.get_executor(), coretry::policy{}, o, factory, status_classifier{},
                                       [&](std::exception_ptr, coretry::outcome<int>) { called = true; });
    CHECK_THROWS_AS(runner.run(), coretry::testing::deadlock_error);
  }
  CHECK_FALSE(called);
  CHECK(observer.stuck == 1);
  CHECK(observer.stuck_attempt == 1);
  // Cancelled at the attempt's deadline (250 ms), then every 10 ms until the
  // overall deadline (1000 ms) and three repeats beyond it.
  CHECK(observer.stuck_at == 1040ms);
  // Once the attempt ends, the operation completes as usual.
  REQUIRE(kept);
  auto h = std::move(*kept);
  kept.reset();
  std::move(h)(asio::error::operation_aborted, 0);
  runner.run();
  CHECK(called);
}

TEST_CASE("contract: an attempt whose start throws after starting an operation is reported once") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  manual_timer started(io);
  int calls = 0;
  auto factory = [&](const context&) {
    return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code, int)>(
        [&started](auto handler) {
          started.expires_after(10ms);
          started.async_wait(asio::append(std::move(handler), 200));
          throw std::runtime_error("started, then threw");
        },
        asio::deferred);
  };
  coretry::async_retry<manual_timer>(io.get_executor(), coretry::policy{}, idempotent(), factory, status_classifier{},
                                     [&](std::exception_ptr e, coretry::outcome<int>) {
                                       ++calls;
                                       CHECK(e);
                                     });
  runner.run();
  CHECK(calls == 1);
}

TEST_CASE("contract: coretry's codes compare equal to the portable conditions") {
  const boost::system::error_code cancelled = coretry::stop_reason::cancelled;
  const boost::system::error_code timed_out = coretry::attempt_error::timed_out;
  CHECK(cancelled == boost::system::errc::operation_canceled);
  CHECK(timed_out == boost::system::errc::timed_out);
  CHECK(cancelled != boost::system::errc::timed_out);
  const boost::system::error_code exhausted = coretry::stop_reason::deadline_exhausted;
  CHECK(exhausted != boost::system::errc::timed_out);
}

TEST_CASE("contract: a manual timer set to expire after duration::max saturates like steady_timer") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  manual_timer t(io);
  runner.run_for(1s);
  t.expires_after(manual_clock::duration::max());
  CHECK(t.expiry() == manual_clock::time_point::max());
  bool fired = false;
  t.async_wait([&](boost::system::error_code ec) { fired = !ec; });
  runner.run_for(24h);
  CHECK_FALSE(fired);
  t.cancel();
  runner.run_ready();
}

TEST_CASE("contract: a policy that leaves no time for any attempt is refused") {
  coretry::policy p;
  p.min_attempt_allowance = coretry::duration::zero();
  p.completion_reserve = p.overall_deadline;
  const auto problem = p.validate();
  REQUIRE(problem);
  CHECK(problem->find("no attempt could ever start") != std::string::npos);
  p.timer_slack = -1ms;
  p.completion_reserve = 50ms;
  REQUIRE(p.validate());
  CHECK(p.validate()->find("timer_slack") != std::string::npos);
}
