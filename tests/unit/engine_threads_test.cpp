// The engine's operations on several threads: async_retry and
// async_with_deadline started from outside the io_context or on a
// multi-threaded one, hedged operations on four threads, handlers and
// coroutines on a second io_context, completion tokens used across threads,
// the deadline queue shared by many threads.
// Labelled `threads` (coretry_thread_tests), so that ThreadSanitizer runs
// them; each section keeps the names of the cases of the file it names.

#include "test_support.hpp"
#include "test_operations.hpp"

#include <policies.hpp>

#include <coretry/budget.hpp>
#include <coretry/decision_core.hpp>
#include <coretry/detail/block_cache.hpp>
#include <coretry/detail/deadline_queue.hpp>
#include <coretry/gate.hpp>
#include <coretry/latency_tracker.hpp>
#include <coretry/prometheus.hpp>
#include <coretry/prometheus_phases.hpp>
#include <coretry/with_deadline.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

// ---- from async_retry_test.cpp
namespace threads_from_async_retry {
using namespace coretry_tests;

TEST_CASE("the first attempt starts on the operation's strand, not on the calling thread") {
  // Real threads: where the attempt starts is asserted, not when.
  asio::io_context io(2);
  auto guard = asio::make_work_guard(io);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) threads.emplace_back([&] { io.run(); });
  coretry::policy p;
  coretry::retry_options options;
  options.safety = coretry::repeat_safety::idempotent;
  constexpr int operations = 200;
  std::atomic<int> started_on_caller{0};
  std::atomic<int> completions{0};
  const auto caller = std::this_thread::get_id();
  for (int i = 0; i < operations; ++i) {
    // The io_context's own executor on two threads: the operation makes a strand.
    coretry::async_retry(
        io.get_executor(), p, options,
        [&](coretry::attempt_context<std::chrono::steady_clock>) {
          if (std::this_thread::get_id() == caller) started_on_caller.fetch_add(1);
          // Completes as soon as the strand runs it, while its starter may still be busy.
          return deferred_attempt([&io](auto handler) {
            auto ex = asio::get_associated_executor(handler, io.get_executor());
            asio::post(ex, asio::append(std::move(handler), boost::system::error_code{}, 1));
          });
        },
        coretry::default_classifier{}, [&](std::exception_ptr e, coretry::outcome<int> r) {
          CHECK_FALSE(e);
          CHECK(r.succeeded());
          completions.fetch_add(1);
        });
  }
  guard.reset();
  for (auto& t : threads) t.join();
  CHECK(started_on_caller.load() == 0);
  CHECK(completions.load() == operations);
}

TEST_CASE("a strand on a multi-threaded io_context: every handler exactly once") {
  // Real time, real threads: counts are asserted, durations are not.
  asio::io_context io(4);
  coretry::policy p = coretry::test::quick_policy(5s, 2ms, 1ms);
  p.max_attempts = 4;
  p.min_attempt_allowance = 1ms;
  p.completion_reserve = 0ms;
  coretry::token_bucket_budget budget;
  coretry::retry_counters counters;
  coretry::retry_options options;
  options.safety = coretry::repeat_safety::idempotent;
  options.budget = &budget;
  options.observer = &counters;
  constexpr int operations = 400;
  std::atomic<int> completions{0};
  std::vector<std::unique_ptr<asio::cancellation_signal>> cancels;
  for (int i = 0; i < operations; ++i) {
    auto strand = asio::make_strand(io);
    cancels.push_back(std::make_unique<asio::cancellation_signal>());
    auto attempt = [i](coretry::attempt_context<std::chrono::steady_clock> c) -> asio::awaitable<int> {
      asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::microseconds(500 * ((i + c.number) % 6)));
      co_await t.async_wait(asio::use_awaitable);
      if ((i + c.number) % 3 != 0) throw boost::system::system_error(asio::error::connection_reset);
      co_return i;
    };
    coretry::async_retry(strand, p, options, attempt, coretry::default_classifier{},
                         asio::bind_cancellation_slot(cancels.back()->slot(),
                                                      [&](std::exception_ptr e, coretry::outcome<int>) {
                                                        CHECK_FALSE(e);
                                                        completions.fetch_add(1);
                                                      }));
    if (i % 5 == 0) {
      // Cancel some from their own strand, as the contract asks.
      asio::post(strand, [&, i] { cancels[i]->emit(asio::cancellation_type::terminal); });
    }
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&] { io.run(); });
  for (auto& t : threads) t.join();
  CHECK(completions.load() == operations);
  const auto s = counters.read();
  std::uint64_t stops = 0;
  for (auto n : s.stops) stops += n;
  CHECK(stops == operations);
  CHECK(s.operations == operations);
}

} // namespace threads_from_async_retry

// ---- from with_deadline_test.cpp
namespace threads_from_with_deadline {
using namespace coretry_tests;
using coretry::deadline_outcome;

TEST_CASE("with_deadline: started from a thread outside the io_context, the operation starts on the handler's strand") {
  // Two threads run the io_context; the calls come from this one. Started
  // here, an operation could complete on the strand while the call was
  // still arming its deadline (a data race on the runner: one left waiting
  // ends at its 2 s deadline, as a failure here).
  asio::io_context io(2);
  auto work = asio::make_work_guard(io);
  std::thread a([&] { io.run(); });
  std::thread b([&] { io.run(); });
  auto strand = asio::make_strand(io);
  constexpr int calls = 200;
  std::atomic<int> started_off_strand{0};
  std::atomic<int> completed{0};
  std::atomic<int> handled_off_strand{0};
  for (int i = 0; i < calls; ++i) {
    auto op = [&](auto handler) {
      if (!strand.running_in_this_thread()) ++started_off_strand;
      auto ex = asio::get_associated_executor(handler);
      asio::post(ex, [h = std::move(handler)]() mutable { std::move(h)(boost::system::error_code{}, 3); });
    };
    coretry::async_with_deadline<int>(io.get_executor(),
                                      coretry::instant_after(std::chrono::steady_clock::now(), std::chrono::seconds(2)),
                                      op, asio::bind_executor(strand, [&](deadline_outcome<int> r) {
                                        if (!strand.running_in_this_thread()) ++handled_off_strand;
                                        if (!r.error && r.value && *r.value == 3) ++completed;
                                      }));
  }
  work.reset();
  a.join();
  b.join();
  CHECK(completed == calls);
  CHECK(started_off_strand == 0);
  CHECK(handled_off_strand == 0);
}

} // namespace threads_from_with_deadline
// ---- from hedging_test.cpp
namespace threads_from_hedging {
using namespace coretry_tests;

TEST_CASE("hedging: many hedged operations on four threads, each handler once") {
  asio::io_context io;
  constexpr int operations = 300;
  std::vector<std::atomic<int>> ran(operations);
  std::atomic<int> succeeded{0};
  coretry::retry_counters counters;
  coretry::policy p;
  p.max_attempts = 4;
  p.hedging.max_hedges = 2;
  p.hedging.delay = std::chrono::microseconds(200);
  coretry::retry_options o;
  o.safety = coretry::repeat_safety::idempotent;
  o.observer = &counters;
  for (int i = 0; i < operations; ++i) {
    auto factory = [i](coretry::attempt_context<std::chrono::steady_clock> c) -> asio::awaitable<int> {
      asio::steady_timer t(co_await asio::this_coro::executor);
      t.expires_after(std::chrono::microseconds(((i * 7 + static_cast<int>(c.number) * 13) % 5) * 150));
      co_await t.async_wait(asio::use_awaitable);
      co_return 200;
    };
    coretry::async_retry<asio::steady_timer>(io.get_executor(), p, o, factory, status_classifier{},
                                             [&, i](std::exception_ptr e, coretry::outcome<int> r) {
                                               ++ran[i];
                                               if (!e && r.succeeded()) ++succeeded;
                                             });
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&] { io.run(); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < operations; ++i) CHECK(ran[i] == 1);
  CHECK(succeeded == operations);
  CHECK(counters.read().hedges_sent > 0);
}

} // namespace threads_from_hedging

// ---- from contract_test.cpp
namespace threads_from_contract {
using namespace coretry_tests;
using coretry::stop_reason;

TEST_CASE("contract: a callback bound to another io_context runs there, and keeps it running") {
  asio::io_context a;
  asio::io_context b;
  coretry::policy p;
  std::thread::id ran_on;
  int calls = 0;
  asio::steady_timer work(a);
  auto attempt = [&work](const coretry::attempt_context<std::chrono::steady_clock>&) {
    work.expires_after(std::chrono::milliseconds(20));
    return work.async_wait(asio::deferred);
  };
  coretry::async_retry(a.get_executor(), p, idempotent(), attempt,
                       asio::bind_executor(b, [&](std::exception_ptr e, coretry::outcome<std::monostate> r) {
                         CHECK_FALSE(e);
                         CHECK(r.reason == stop_reason::succeeded);
                         ran_on = std::this_thread::get_id();
                         ++calls;
                       }));
  std::thread runner_a([&] { a.run(); });
  // b has no work of its own: only the pending operation's counted work
  // keeps run() from returning before the handler has run on this thread.
  b.run();
  runner_a.join();
  CHECK(calls == 1);
  CHECK(ran_on == std::this_thread::get_id());
}

TEST_CASE("contract: a coroutine on another io_context resumes on its own thread") {
  asio::io_context a;
  asio::io_context b;
  coretry::policy p;
  bool resumed_on_b = false;
  bool done = false;
  asio::steady_timer work(a);
  auto attempt = [&work](const coretry::attempt_context<std::chrono::steady_clock>&) {
    work.expires_after(std::chrono::milliseconds(20));
    return work.async_wait(asio::deferred);
  };
  // a's thread may start before the coroutine has started the operation there.
  auto keep_a = asio::make_work_guard(a);
  asio::co_spawn(
      b,
      [&]() -> asio::awaitable<void> {
        auto [e, r] = co_await coretry::async_retry(a.get_executor(), p, idempotent(), attempt,
                                                    asio::as_tuple(asio::use_awaitable));
        CHECK_FALSE(e);
        CHECK(r.reason == stop_reason::succeeded);
        resumed_on_b = b.get_executor().running_in_this_thread();
        done = true;
        keep_a.reset();
      },
      asio::detached);
  std::thread runner_a([&] { a.run(); });
  b.run();
  runner_a.join();
  CHECK(done);
  CHECK(resumed_on_b);
}

TEST_CASE("contract: completion tokens and adapters") {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  coretry::policy p;
  SUBCASE("the default token is the executor's (deferred)") {
    fake_dependency dep({{10ms}});
    auto op = coretry::async_retry<manual_timer>(io.get_executor(), p, idempotent(), dep.factory(),
                                                 status_classifier{});
    CHECK(dep.calls == 0); // nothing starts until the deferred operation is
    std::optional<coretry::outcome<int>> result;
    std::move(op)([&](std::exception_ptr, coretry::outcome<int> r) { result = std::move(r); });
    runner.run();
    REQUIRE(result);
    CHECK(result->reason == stop_reason::succeeded);
  }
  SUBCASE("a token in the classifier's place is taken as the token") {
    fake_dependency dep({{10ms}});
    std::optional<coretry::outcome<coretry::outcome<int>>> result;
    // default_classifier on an awaitable<int>: errors decide.
    coretry::async_retry<manual_timer>(io.get_executor(), p, idempotent(), dep.factory(),
                                       [&](std::exception_ptr, auto r) { (void)r; result.emplace(); });
    runner.run();
    CHECK(result);
  }
  SUBCASE("as_tuple and use_awaitable") {
    fake_dependency dep({{10ms, {}, 503}, {10ms}});
    coretry::testing::scripted_random draws{0.5};
    coretry::retry_options o = idempotent();
    o.random = &draws;
    bool done = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          auto [e, r] = co_await coretry::async_retry<manual_timer>(io.get_executor(), p, o, dep.factory(),
                                                                    status_classifier{},
                                                                    asio::as_tuple(asio::use_awaitable));
          CHECK_FALSE(e);
          CHECK(r.reason == stop_reason::succeeded);
          CHECK(r.attempts == 2);
          done = true;
        },
        asio::detached);
    runner.run();
    CHECK(done);
  }
  SUBCASE("bind_allocator: the operation's memory comes from the handler's allocator") {
    struct counts {
      int allocations = 0;
      int deallocations = 0;
    };
    counts c;
    fake_dependency dep({{10ms}});
    std::optional<coretry::outcome<int>> result;
    coretry::async_retry<manual_timer>(
        io.get_executor(), p, idempotent(), dep.factory(), status_classifier{},
        asio::bind_allocator(counting_allocator<void>(&c.allocations, &c.deallocations),
                             [&](std::exception_ptr, coretry::outcome<int> r) {
                               // Freed before the handler is called.
                               CHECK(c.allocations == c.deallocations);
                               result = std::move(r);
                             }));
    runner.run();
    REQUIRE(result);
    CHECK(c.allocations > 0);
    CHECK(c.allocations == c.deallocations);
  }
  SUBCASE("use_future from another thread") {
    asio::io_context real;
    asio::steady_timer work(real);
    auto attempt = [&work](const coretry::attempt_context<std::chrono::steady_clock>&) {
      work.expires_after(std::chrono::milliseconds(5));
      return work.async_wait(asio::deferred);
    };
    auto future = coretry::async_retry(real.get_executor(), p, idempotent(), attempt, asio::use_future);
    std::thread t([&] { real.run(); });
    auto result = future.get();
    t.join();
    CHECK(result.reason == stop_reason::succeeded);
  }
  SUBCASE("a deferred sequence as the attempt") {
    manual_timer t(io);
    auto factory = [&](const context&) {
      t.expires_after(20ms);
      return t.async_wait(asio::deferred) |
             asio::deferred([](boost::system::error_code ec) { return asio::deferred.values(ec, 200); });
    };
    std::optional<coretry::outcome<int>> result;
    coretry::async_retry<manual_timer>(io.get_executor(), p, idempotent(), factory, status_classifier{},
                                       [&](std::exception_ptr, coretry::outcome<int> r) { result = std::move(r); });
    runner.run();
    REQUIRE(result);
    CHECK(result->reason == stop_reason::succeeded);
    CHECK(result->value == 200);
    CHECK(runner.elapsed() == 20ms);
  }
  SUBCASE("parallel_group: the losing retry is cancelled and says so") {
    fake_dependency dep({{200ms}});
    manual_timer race(io);
    race.expires_after(30ms);
    std::optional<coretry::outcome<int>> result;
    asio::experimental::make_parallel_group(
        coretry::async_retry<manual_timer>(io.get_executor(), p, idempotent(), dep.factory(), status_classifier{},
                                           asio::deferred),
        race.async_wait(asio::deferred))
        .async_wait(asio::experimental::wait_for_one(),
                    [&](std::array<std::size_t, 2> order, std::exception_ptr, coretry::outcome<int> r,
                        boost::system::error_code) {
                      CHECK(order[0] == 1);
                      result = std::move(r);
                    });
    runner.run();
    REQUIRE(result);
    CHECK(result->reason == stop_reason::cancelled);
    CHECK(runner.elapsed() == 30ms);
  }
}

} // namespace threads_from_contract

// ---- from deadline_queue_test.cpp
namespace threads_from_deadline_queue {
using namespace coretry_tests;
using coretry::deadline_outcome;

TEST_CASE("deadline queue: many threads add, remove and expire deadlines of one context") {
  asio::io_context io(2);
  constexpr int operations = 2000;
  std::atomic<int> timed_out{0}, completed{0}, handlers{0};
  auto guard = asio::make_work_guard(io);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) threads.emplace_back([&] { io.run(); });
  for (int i = 0; i < operations; ++i) {
    auto strand = asio::make_strand(io);
    const auto deadline = coretry::instant_after(std::chrono::steady_clock::now(), std::chrono::milliseconds(1 + i % 5));
    auto handler = asio::bind_executor(strand, [&](deadline_outcome<int> r) {
      ++handlers;
      if (r.error == coretry::attempt_error::timed_out) ++timed_out;
      else if (!r.error) ++completed;
    });
    // Started on the strand its handler runs on, as an attempt is: a start
    // from any other thread could race the operation's own completion.
    asio::post(strand, [&io, i, deadline, handler = std::move(handler)]() mutable {
      if (i % 2 == 0)
        coretry::async_with_deadline<int>(handler.get_executor(), deadline, silent_operation<int>(io),
                                          std::move(handler));
      else
        coretry::async_with_deadline<int>(handler.get_executor(), deadline, immediate_operation(), std::move(handler));
    });
  }
  guard.reset();
  for (auto& t : threads) t.join();
  CHECK(handlers == operations);
  CHECK(timed_out == operations / 2);
  CHECK(completed == operations / 2);
  CHECK(coretry::detail::deadline_queue_of<asio::steady_timer>(io.get_executor()).size() == 0);
}

} // namespace threads_from_deadline_queue

