// What operations share, under contention from many threads: the retry
// budget, the gate, the latency tracker, the block cache and the default
// random source.
// Labelled `threads` (coretry_thread_tests), so that ThreadSanitizer runs
// them; each section keeps the names of the cases of the file it names.

#include "test_support.hpp"
#include "latency_samples.hpp"

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

// ---- from latency_tracker_test.cpp
namespace threads_from_latency_tracker {
using namespace std::chrono_literals;
using coretry::duration;
using coretry::latency_result;
using coretry::latency_tracker;
using namespace coretry_tests::latency;

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

