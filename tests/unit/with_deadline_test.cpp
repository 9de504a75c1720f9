// async_with_deadline on virtual time: every instant exact.

#include "test_support.hpp"
#include "test_operations.hpp"

#include <coretry/with_deadline.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <memory>

using namespace coretry_tests;
using coretry::deadline_outcome;

namespace {

/// An operation that ignores cancellation: it completes with (no error, 7)
/// `takes` after it starts, whatever it is told.
auto deaf_operation(asio::io_context& io, coretry::duration takes) {
  return [&io, takes](auto handler) {
    auto timer = std::make_shared<manual_timer>(io);
    timer->expires_after(takes);
    timer->async_wait([timer, h = std::move(handler)](boost::system::error_code) mutable {
      std::move(h)(boost::system::error_code{}, 7);
    });
  };
}

/// What the caller's handler saw, and the virtual time it ran at.
struct finished {
  std::optional<deadline_outcome<int>> result;
  coretry::duration at{};
};

/// A handler that records into `f`.
auto recorder(coretry::testing::manual_runner& runner, finished& f) {
  return [&runner, &f](deadline_outcome<int> r) {
    f.at = runner.elapsed();
    f.result = std::move(r);
  };
}

} // namespace

TEST_CASE("with_deadline: an operation done before the deadline completes with its value, when it is done") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  fake_dependency dep({{ms(30)}});
  finished f;
  coretry::async_with_deadline<int, manual_timer>(io.get_executor(), at(ms(100)), dep.call(), recorder(runner, f));
  runner.run();
  REQUIRE(f.result);
  CHECK_FALSE(f.result->error);
  CHECK_FALSE(f.result->exception);
  REQUIRE(f.result->value);
  CHECK(*f.result->value == 200);
  CHECK(f.at == ms(30));
  CHECK(dep.cancelled_at.empty());
}

TEST_CASE("with_deadline: at the deadline the operation is cancelled and the caller sees timed_out") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  fake_dependency dep({{ms(500)}});
  finished f;
  std::size_t cancellations_seen_by_then = 0;
  coretry::async_with_deadline<int, manual_timer>(io.get_executor(), at(ms(100)), dep.call(),
                                                  [&, record = recorder(runner, f)](deadline_outcome<int> r) {
                                                    cancellations_seen_by_then = dep.cancelled_at.size();
                                                    record(std::move(r));
                                                  });
  runner.run();
  REQUIRE(f.result);
  CHECK(f.result->error == coretry::attempt_error::timed_out);
  CHECK(f.at == ms(100));
  REQUIRE(dep.cancelled_at.size() == 1);
  CHECK(dep.cancelled_at[0] == ms(100));
  CHECK(cancellations_seen_by_then == 1); // the operation had ended before the handler ran
}

TEST_CASE("with_deadline: the handler waits for an operation that is slow to stop") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  finished f;
  coretry::async_with_deadline<int, manual_timer>(io.get_executor(), at(ms(100)), deaf_operation(io, ms(150)),
                                                  recorder(runner, f));
  runner.run();
  REQUIRE(f.result);
  CHECK(f.at == ms(150));
  CHECK(f.result->error == coretry::attempt_error::timed_out);
  REQUIRE(f.result->value); // what the operation had is kept
  CHECK(*f.result->value == 7);
}

TEST_CASE("with_deadline: the caller's cancellation reaches the operation and is not a timeout") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  fake_dependency dep({{ms(500)}});
  asio::cancellation_signal signal;
  manual_timer canceller(io);
  canceller.expires_after(ms(40));
  canceller.async_wait([&](boost::system::error_code) { signal.emit(asio::cancellation_type::partial); });
  finished f;
  coretry::async_with_deadline<int, manual_timer>(io.get_executor(), at(ms(100)), dep.call(),
                                                  asio::bind_cancellation_slot(signal.slot(), recorder(runner, f)));
  runner.run();
  REQUIRE(f.result);
  CHECK(f.result->error == asio::error::operation_aborted);
  CHECK(f.at == ms(40));
  REQUIRE(dep.cancelled_at.size() == 1);
  CHECK(dep.cancelled_at[0] == ms(40));
}

TEST_CASE("with_deadline: a deadline already past cuts the operation off as soon as it starts") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  runner.run_for(ms(50));
  fake_dependency dep({{ms(30)}});
  finished f;
  coretry::async_with_deadline<int, manual_timer>(io.get_executor(), at(ms(10)), dep.call(), recorder(runner, f));
  runner.run();
  REQUIRE(f.result);
  CHECK(f.result->error == coretry::attempt_error::timed_out);
  CHECK(f.at == ms(50));
  REQUIRE(dep.started_at.size() == 1);
  CHECK(dep.started_at[0] == ms(50));
  REQUIRE(dep.cancelled_at.size() == 1);
  CHECK(dep.cancelled_at[0] == ms(50));
}

TEST_CASE("with_deadline: the handler runs on its own executor, never inside the initiating call") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  auto strand = asio::make_strand(io);
  bool called = false;
  bool on_strand = false;
  // An operation that completes inside its own initiation.
  auto at_once = [](auto handler) { std::move(handler)(boost::system::error_code{}, 5); };
  coretry::async_with_deadline<int, manual_timer>(io.get_executor(), at(ms(100)), at_once,
                                                  asio::bind_executor(strand, [&](deadline_outcome<int> r) {
                                                    called = true;
                                                    on_strand = strand.running_in_this_thread();
                                                    CHECK_FALSE(r.error);
                                                    REQUIRE(r.value);
                                                    CHECK(*r.value == 5);
                                                  }));
  CHECK_FALSE(called);
  runner.run();
  CHECK(called);
  CHECK(on_strand);
  CHECK(runner.elapsed() == ms(0));
}

TEST_CASE("with_deadline: awaited from a coroutine, with the timer type defaulted to steady_timer") {
  asio::io_context io;
  std::optional<deadline_outcome<int>> result;
  auto body = [&]() -> asio::awaitable<void> {
    auto quick = []() -> asio::awaitable<int> { co_return 11; };
    result = co_await coretry::async_with_deadline<int>(
        io.get_executor(), coretry::instant_after(std::chrono::steady_clock::now(), std::chrono::hours(1)), quick(),
        asio::use_awaitable);
  };
  asio::co_spawn(io, body(), asio::detached);
  io.run();
  REQUIRE(result);
  CHECK_FALSE(result->error);
  REQUIRE(result->value);
  CHECK(*result->value == 11);
}

TEST_CASE("with_deadline: instant_after saturates at the clock's last instant") {
  const auto now = std::chrono::steady_clock::now();
  CHECK(coretry::instant_after(now, coretry::duration::max()) == std::chrono::steady_clock::time_point::max());
  CHECK(coretry::instant_after(at(ms(5)), ms(7)) == at(ms(12)));
}

TEST_CASE("with_deadline: a handler on a second io_context, cancelled before the operation starts on its strand") {
  // The runner must be listening to the slot from the initiating call: the
  // operation starts later, on a strand of the I/O context, and an emission
  // from the caller's side in between would otherwise find nobody there.
  asio::io_context other; // the handler's, destroyed last
  asio::io_context io;    // the operation's
  auto strand = asio::make_strand(other);
  asio::cancellation_signal cancel;
  std::optional<deadline_outcome<int>> outcome;
  coretry::async_with_deadline<int>(
      io.get_executor(), coretry::instant_after(std::chrono::steady_clock::now(), std::chrono::hours(1)),
      silent_operation<int>(io),
      asio::bind_cancellation_slot(cancel.slot(),
                                   asio::bind_executor(strand, [&](deadline_outcome<int> o) { outcome = o; })));
  cancel.emit(asio::cancellation_type::terminal); // nothing has run yet
  io.run_for(std::chrono::milliseconds(500));
  other.run_for(std::chrono::milliseconds(500));
  REQUIRE(outcome);
  CHECK(outcome->error == asio::error::operation_aborted);
}
