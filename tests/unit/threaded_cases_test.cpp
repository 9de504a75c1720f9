// The engine's single-threaded suites' cases that run code on more than one
// thread, gathered here so that they run in coretry_thread_tests (labelled
// `threads`, run under ThreadSanitizer; tests/README.md, "What CI costs").
// Each section comes from the file it names, keeps its cases' names, and
// has the helpers it needs in a namespace of its own.

#include "test_support.hpp"

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

namespace {

/// An attempt operation started by `initiation(handler)`, completing with
/// (error_code, int): for operations that complete or fail at once.
template <class Initiation>
auto deferred_attempt(Initiation initiation) {
  return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code, int)>(std::move(initiation),
                                                                                          asio::deferred);
}

} // namespace

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

// ---- from block_cache_test.cpp
namespace threads_from_block_cache {
using namespace coretry_tests;
using coretry::detail::block_cache;

namespace {

void drain() { block_cache::release_cached(); }

// Made before the thread's cache, so destroyed after it: what it frees then
// must go straight back to the heap.
struct freed_at_thread_end {
  void* block = nullptr;
  ~freed_at_thread_end() {
    if (block) block_cache::deallocate(block, 256);
  }
};

} // namespace

TEST_CASE("block cache: a block freed on another thread is kept by that thread, which frees it when it ends") {
  drain();
  void* block = block_cache::allocate(128);
  std::size_t there = 0;
  std::thread([&] {
    block_cache::deallocate(block, 128);
    there = block_cache::cached();
  }).join();
  CHECK(there == 1);
  CHECK(block_cache::cached() == 0);
}

TEST_CASE("block cache: a block freed after its thread's cache is gone goes back to the heap") {
  bool ran = false;
  std::thread([&] {
    static thread_local freed_at_thread_end late;
    late.block = nullptr;
    void* block = block_cache::allocate(256); // makes the cache, after `late`
    late.block = block;
    ran = true;
  }).join();
  // Under AddressSanitizer a block lost or freed into a destroyed cache is reported.
  CHECK(ran);
}

} // namespace threads_from_block_cache

// ---- from budget_test.cpp
namespace threads_from_budget {

TEST_CASE("budget: thread-safe under contention, no token granted twice") {
  coretry::token_bucket_budget budget({.capacity = 1000, .tokens_per_initial_request = 0});
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10'000; ++i)
        if (budget.try_acquire_retry()) granted.fetch_add(1);
    });
  for (auto& t : threads) t.join();
  CHECK(granted.load() == 1000);
}

} // namespace threads_from_budget

// ---- from contract_test.cpp
namespace threads_from_contract {
using namespace coretry_tests;
using coretry::stop_reason;

namespace {

template <class T>
struct counting_allocator {
  using value_type = T;
  counting_allocator(int* allocations, int* deallocations) noexcept : allocs(allocations), deallocs(deallocations) {}
  template <class U>
  counting_allocator(const counting_allocator<U>& other) noexcept : allocs(other.allocs), deallocs(other.deallocs) {}
  T* allocate(std::size_t n) {
    ++*allocs;
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) {
    ++*deallocs;
    std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const counting_allocator<U>& other) const noexcept {
    return allocs == other.allocs;
  }
  int* allocs;
  int* deallocs;
};

} // namespace

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

namespace {

template <class Value, class Timer = asio::steady_timer>
auto silent_operation(asio::io_context& io) {
  return [&io](auto handler) {
    auto timer = std::make_shared<Timer>(io);
    timer->expires_after(std::chrono::hours(24));
    auto slot = asio::get_associated_cancellation_slot(handler);
    auto ex = asio::get_associated_executor(handler);
    timer->async_wait(asio::bind_cancellation_slot(
        slot, asio::bind_executor(ex, [timer, h = std::move(handler)](boost::system::error_code ec) mutable {
          std::move(h)(ec ? ec : asio::error::timed_out, Value{});
        })));
  };
}

auto immediate_operation() {
  return [](auto handler) {
    auto ex = asio::get_associated_executor(handler);
    asio::post(ex, [h = std::move(handler)]() mutable { std::move(h)(boost::system::error_code{}, 7); });
  };
}

} // namespace

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

// ---- from decision_core_test.cpp
namespace threads_from_decision_core {

TEST_CASE("core: independent default seeding") {
  auto draws = [] {
    std::vector<std::uint64_t> v;
    for (int i = 0; i < 4; ++i) v.push_back(coretry::independent_random::instance().uniform(UINT64_MAX));
    return v;
  };
  SUBCASE("two threads draw different schedules") {
    std::vector<std::uint64_t> a, b;
    std::thread t1([&] { a = draws(); });
    std::thread t2([&] { b = draws(); });
    t1.join();
    t2.join();
    CHECK(a != b);
  }
  SUBCASE("a forked process does not repeat its parent's draws") {
    draws(); // the parent's generator exists before the fork
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      const auto v = draws();
      (void)!::write(pipe_fds[1], v.data(), v.size() * sizeof(std::uint64_t));
      ::_exit(0);
    }
    const auto mine = draws();
    std::vector<std::uint64_t> theirs(4);
    REQUIRE(::read(pipe_fds[0], theirs.data(), theirs.size() * sizeof(std::uint64_t)) ==
            static_cast<ssize_t>(theirs.size() * sizeof(std::uint64_t)));
    ::waitpid(child, nullptr, 0);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    CHECK(mine != theirs);
  }
}

} // namespace threads_from_decision_core

// ---- from gate_test.cpp
namespace threads_from_gate {
using namespace std::chrono_literals;
using coretry::attempt_status;
using coretry::duration;
using coretry::gate_decision;
using coretry::test::small_gate;
using action = coretry::gate_decision::action;

namespace {
constexpr duration never = duration::max();
} // namespace

TEST_CASE("gate: threads sharing one gate record and ask concurrently, slots stay distinct") {
  // Four threads on interleaved virtual time (thread t at (4i + t) x 100 us,
  // no shared clock: the gate's own synchronisation is all there is between
  // them): a total outage, then recovery.
  coretry::local_gate gate(small_gate());
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

} // namespace threads_from_gate

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

// ---- from latency_tracker_test.cpp
namespace threads_from_latency_tracker {
using namespace std::chrono_literals;
using coretry::duration;
using coretry::latency_result;
using coretry::latency_tracker;

namespace {
constexpr auto success = latency_result::success;
constexpr auto timeout = latency_result::timeout;
constexpr auto failure = latency_result::failure;

latency_tracker::options uncached() {
  latency_tracker::options o;
  o.refresh_interval = duration::zero();
  return o;
}
} // namespace

TEST_CASE("latency tracker: concurrent recorders lose nothing within a sub-window") {
  latency_tracker t(uncached());
  t.record(failure, 0ns, 2s); // opens the sub-window of period 2
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&t, k] {
      for (int i = 0; i < 20'000; ++i) {
        t.record(success, std::chrono::microseconds(100 * (k + 1)), 2s + std::chrono::microseconds(i));
        if (i % 4 == 0) t.record(timeout, 50ms, 2s);
      }
    });
  for (auto& th : threads) th.join();
  const auto s = t.compute(100, 2s);
  CHECK(s.successes == 80'000);
  CHECK(s.percentile == latency_tracker::upper_edge(400us));
  CHECK(t.percentile(25, 2s) == latency_tracker::upper_edge(100us));
  CHECK(s.longest_censored == latency_tracker::upper_edge(50ms));
}

} // namespace threads_from_latency_tracker

// ---- from prometheus_phases_test.cpp
namespace threads_from_prometheus_phases {
using namespace std::chrono_literals;
using coretry::attempt_phases_event;
using coretry::phase;
using coretry::phase_timings;
using coretry::prometheus_phase_histograms;

namespace {

const phase_timings::clock::time_point origin{std::chrono::seconds(1000)};

/// A reused connection: 1 ms waiting for it (exactly the first bucket's
/// bound), 0.5 ms writing, `server` waiting for the first byte, 3 ms reading.
phase_timings reused(coretry::duration server) {
  phase_timings p;
  p.enter(phase::pool_wait, origin);
  p.enter(phase::write, origin + 1ms);
  p.enter(phase::first_byte, origin + 1500us);
  p.enter(phase::read, origin + 1500us + server);
  p.finish(origin + 4500us + server);
  return p;
}

} // namespace

TEST_CASE("phase histograms: concurrent recording loses nothing") {
  prometheus_phase_histograms h({"/a"});
  const phase_timings p = reused(1ms);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) h.attempt_phases(attempt_phases_event{"/a", 1, p, true, true});
    });
  for (auto& thread : threads) thread.join();
  CHECK(h.text().find("coretry_http_phase_duration_seconds_count{route=\"/a\",phase=\"first_byte\"} 40000") !=
        std::string::npos);
}

} // namespace threads_from_prometheus_phases

// ---- from prometheus_test.cpp
namespace threads_from_prometheus {
using namespace std::chrono_literals;
using coretry::attempt_record;
using coretry::prometheus_observer;
using coretry::stop_reason;
using coretry::verdict;

namespace {

// Every sample line, keyed by "name{labels}"; fails on a line that is not a
// comment and not a valid sample.
std::map<std::string, double> parse_samples(const std::string& text) {
  static const std::regex sample_line{R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")(,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*\})? ([-+0-9.eE]+|\+Inf|NaN)$)"};
  std::map<std::string, double> samples;
  std::istringstream lines{text};
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) continue;
    std::smatch match;
    INFO("line: ", line);
    REQUIRE(std::regex_match(line, match, sample_line));
    const auto space = line.rfind(' ');
    CHECK(samples.emplace(line.substr(0, space), std::stod(line.substr(space + 1))).second);
  }
  return samples;
}

void run_operation(prometheus_observer& o, std::string_view route, const std::vector<verdict>& verdicts,
                   stop_reason reason, coretry::duration wait = 10ms) {
  unsigned n = 0;
  for (const verdict& v : verdicts) {
    ++n;
    if (n > 1) o.backoff_scheduled({route, n, 0ms, wait, coretry::wait_source::local});
    o.attempt_started({route, n, 0ms, 100ms});
    attempt_record record;
    record.number = n;
    record.classified = v;
    o.attempt_finished({route, record});
  }
  o.stopped({route, reason, n, 0ms, 0ms});
}

} // namespace

TEST_SUITE("prometheus observer") {

TEST_CASE("counts from many threads add up") {
  prometheus_observer o{{"r"}};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i)
        run_operation(o, "r", {verdict::transient(i % 2 ? "a" : "b"), verdict::success()}, stop_reason::succeeded);
    });
  for (auto& t : threads) t.join();
  const auto s = parse_samples(o.text());
  CHECK(s.at(R"(coretry_operations_total{route="r"})") == 4000);
  CHECK(s.at(R"(coretry_attempts_total{route="r"})") == 8000);
  CHECK(s.at(R"(coretry_attempt_failures_total{route="r",category="a"})") == 2000);
  CHECK(s.at(R"(coretry_attempt_failures_total{route="r",category="b"})") == 2000);
}

} // TEST_SUITE

} // namespace threads_from_prometheus

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
