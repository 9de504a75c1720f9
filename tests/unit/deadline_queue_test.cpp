// The execution context's deadline queue: every attempt deadline and backoff
// wake-up of a context on one timer. On virtual time every expiry is exact
// and the timer is armed only when a deadline becomes the earliest; on a real
// io_context the coalesced timer keeps no run() alive, is freed at shutdown
// and is shared safely by many threads.

#include "test_support.hpp"
#include "test_operations.hpp"

#include <coretry/detail/deadline_queue.hpp>
#include <coretry/with_deadline.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <vector>

using namespace coretry_tests;
using coretry::deadline_outcome;

namespace {


template <class Timer>
std::uint64_t arms_of(asio::io_context& io) {
  return coretry::detail::deadline_queue_of<Timer>(io.get_executor()).arms();
}

} // namespace

TEST_CASE("deadline queue: later deadlines reuse the armed timer, and each expires at its exact instant, in order") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  std::vector<std::pair<int, coretry::duration>> expired;
  const auto start = [&](int name, coretry::duration deadline) {
    coretry::async_with_deadline<int, manual_timer>(io.get_executor(), at(deadline), silent_operation<int, manual_timer>(io),
                                                    [&, name](deadline_outcome<int> r) {
                                                      CHECK(r.error == coretry::attempt_error::timed_out);
                                                      expired.emplace_back(name, runner.elapsed());
                                                    });
  };
  start(1, ms(100));
  start(2, ms(300));
  start(3, ms(200));
  runner.run_ready();
  // Three deadlines, one arming: the later two went into the queue alone.
  CHECK(arms_of<manual_timer>(io) == 1);
  start(4, ms(50)); // a new earliest moves the timer earlier
  runner.run_ready();
  CHECK(arms_of<manual_timer>(io) == 2);
  runner.run();
  REQUIRE(expired.size() == 4);
  CHECK(expired[0] == std::pair{4, ms(50)});
  CHECK(expired[1] == std::pair{1, ms(100)});
  CHECK(expired[2] == std::pair{3, ms(200)});
  CHECK(expired[3] == std::pair{2, ms(300)});
  CHECK(coretry::detail::deadline_queue_of<manual_timer>(io.get_executor()).size() == 0);
}

TEST_CASE("deadline queue: deadlines at one instant expire in the order they were set") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  std::vector<int> order;
  for (int name = 0; name < 8; ++name)
    coretry::async_with_deadline<int, manual_timer>(io.get_executor(), at(ms(100)), silent_operation<int, manual_timer>(io),
                                                    [&, name](deadline_outcome<int>) { order.push_back(name); });
  runner.run();
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(runner.elapsed() == ms(100));
}

TEST_CASE("deadline queue: a deadline removed before it expires moves no time and fires nothing") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  int done = 0;
  coretry::async_with_deadline<int, manual_timer>(io.get_executor(), at(ms(1000)), immediate_operation(),
                                                  [&](deadline_outcome<int> r) {
                                                    CHECK_FALSE(r.error);
                                                    CHECK(*r.value == 7);
                                                    ++done;
                                                  });
  runner.run();
  CHECK(done == 1);
  // The queue emptied, so its virtual timer was cancelled: the runner had no
  // reason to jump to the removed deadline.
  CHECK(runner.elapsed() == ms(0));
}

TEST_CASE("deadline queue: removing deadlines is free and leaves the real timer to a later one, and run() returns") {
  asio::io_context io(1);
  const auto began = std::chrono::steady_clock::now();
  constexpr int operations = 1000;
  int done = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < operations; ++i) {
          auto r = co_await coretry::async_with_deadline<int>(
              io.get_executor(), coretry::instant_after(std::chrono::steady_clock::now(), std::chrono::seconds(60)),
              immediate_operation(), asio::use_awaitable);
          if (!r.error && r.value && *r.value == 7) ++done;
        }
      },
      asio::detached);
  io.run();
  const auto took = std::chrono::steady_clock::now() - began;
  CHECK(done == operations);
  // Every deadline after the first was later than the armed instant: the
  // timer was armed once, not once per operation.
  CHECK(arms_of<asio::steady_timer>(io) == 1);
  // The armed wait outlives the last deadline but no longer counts as work:
  // run() returned long before the 60 s it was armed for.
  CHECK(took < std::chrono::seconds(30));

  // The next deadline reuses the armed wait, and run() still returns.
  io.restart();
  int again = 0;
  coretry::async_with_deadline<int>(io.get_executor(),
                                    coretry::instant_after(std::chrono::steady_clock::now(), std::chrono::seconds(90)),
                                    immediate_operation(), [&](deadline_outcome<int> r) { again += !r.error; });
  io.run();
  CHECK(again == 1);
  CHECK(arms_of<asio::steady_timer>(io) == 1);
  CHECK(std::chrono::steady_clock::now() - began < std::chrono::seconds(30));
}

TEST_CASE("deadline queue: an earlier deadline set after a later one arms the timer once, not once per operation") {
  // Hedging configured, never sent: each operation sets its attempt's
  // deadline (250 ms) and then its hedge's (50 ms), earlier, and removes
  // both once its attempt has succeeded at once.
  asio::io_context io(1);
  coretry::policy p;
  p.hedging.max_hedges = 1;
  coretry::retry_options o;
  o.safety = coretry::repeat_safety::idempotent;
  constexpr int operations = 1000;
  int done = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < operations; ++i) {
          auto r = co_await coretry::async_retry(
              io.get_executor(), p, o, [](const auto&) { return deferred_attempt(immediate_operation()); },
              asio::use_awaitable);
          done += r.succeeded();
        }
      },
      asio::detached);
  io.run();
  CHECK(done == operations);
  // The first operation arms it twice; then once each time an armed
  // instant passes (every 50 ms, on a slow machine), never once per operation.
  CHECK(arms_of<asio::steady_timer>(io) < operations / 10);
}

TEST_CASE("deadline queue: a real deadline still expires on time after the queue went idle") {
  asio::io_context io(1);
  // First a deadline far away, removed at once: the armed wait stays, uncounted.
  coretry::async_with_deadline<int>(io.get_executor(),
                                    coretry::instant_after(std::chrono::steady_clock::now(), std::chrono::seconds(60)),
                                    immediate_operation(), [](deadline_outcome<int>) {});
  io.run();
  io.restart();
  // Then one earlier than the armed instant: the timer is armed again for it.
  const auto set_at = std::chrono::steady_clock::now();
  std::optional<deadline_outcome<int>> result;
  std::chrono::steady_clock::duration took{};
  coretry::async_with_deadline<int>(io.get_executor(), set_at + std::chrono::milliseconds(20), silent_operation<int>(io),
                                    [&](deadline_outcome<int> r) {
                                      took = std::chrono::steady_clock::now() - set_at;
                                      result = std::move(r);
                                    });
  // The start was queued on the handler's executor: once it has run, the
  // timer has been armed again, for this deadline.
  io.poll();
  CHECK(arms_of<asio::steady_timer>(io) == 2);
  io.run();
  REQUIRE(result);
  CHECK(result->error == coretry::attempt_error::timed_out);
  CHECK(took >= std::chrono::milliseconds(20));
  CHECK(took < std::chrono::seconds(30));
}

TEST_CASE("deadline queue: an io_context destroyed with deadlines queued frees every operation and handler") {
  auto alive = std::make_shared<int>(0);
  {
    asio::io_context io(1);
    for (int i = 0; i < 50; ++i)
      coretry::async_with_deadline<int>(
          io.get_executor(), coretry::instant_after(std::chrono::steady_clock::now(), std::chrono::seconds(60)),
          silent_operation<int>(io), [keep = alive](deadline_outcome<int>) { FAIL("a handler ran after shutdown"); });
    io.poll();
    CHECK(alive.use_count() == 51);
    CHECK(coretry::detail::deadline_queue_of<asio::steady_timer>(io.get_executor()).size() == 50);
  }
  // Each queued deadline's reference was given back at shutdown: the
  // operations, and the handlers they held, are gone.
  CHECK(alive.use_count() == 1);
}

TEST_CASE("deadline queue: async_retry's backoff sleeps in the queue, exactly, and its cancellation wakes it") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  fake_dependency dep({{ms(10), asio::error::connection_reset}});
  coretry::policy p;
  p.max_attempts = 3;
  p.overall_deadline = std::chrono::hours(2);
  p.attempt_limit = ms(250);
  p.backoff.jitter = coretry::jitter_kind::none;
  p.backoff.initial_window = std::chrono::hours(1);
  p.backoff.max_window = std::chrono::hours(1);
  coretry::retry_options o;
  o.safety = coretry::repeat_safety::idempotent;
  asio::cancellation_signal cancel;
  std::optional<coretry::outcome<int>> result;
  coretry::async_retry<manual_timer>(io.get_executor(), p, o, dep.factory(), status_classifier{},
                                     asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr,
                                                                                     coretry::outcome<int> r) {
                                       result = std::move(r);
                                     }));
  runner.run_for(ms(10));
  runner.run_ready();
  // Asleep: its wake-up is the only deadline queued.
  CHECK(coretry::detail::deadline_queue_of<manual_timer>(io.get_executor()).size() == 1);
  runner.run_for(ms(500));
  cancel.emit(asio::cancellation_type::terminal);
  runner.run();
  REQUIRE(result);
  CHECK(result->reason == coretry::stop_reason::cancelled);
  CHECK(dep.calls == 1);
  // Cancelled at 510 ms, not woken at the hour.
  CHECK(runner.elapsed() == ms(510));
  CHECK(coretry::detail::deadline_queue_of<manual_timer>(io.get_executor()).size() == 0);
}
