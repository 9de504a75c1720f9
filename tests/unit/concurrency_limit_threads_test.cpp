// The concurrency limit on several threads: taking, waiting, cancelling
// and giving back at once, with an adaptive limit that moves under them.
// No permit may be lost or given twice, and every wait must end exactly once
// (granted, or removed). Runs under the tsan preset too.

#include <coretry/concurrency_limit.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using coretry::concurrency_limit;
using coretry::duration;
using coretry::limit_signal;

namespace {

struct stress_waiter final : coretry::permit_waiter {
  std::atomic<int> accepted{0};
  std::atomic<int> announced{0};
  bool refuse = false; // set by its own thread before it waits
  bool accept_permit() noexcept override {
    if (refuse) return false;
    accepted.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  void permit_granted() noexcept override { announced.fetch_add(1, std::memory_order_release); }
};

struct stress_random {
  std::uint64_t state;
  std::uint64_t next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  }
};

} // namespace

TEST_CASE("concurrency limit threads: no permit lost or doubled, every wait ends once") {
  concurrency_limit::options o;
  o.initial_limit = 2;
  o.min_limit = 1;
  o.max_limit = 3;
  o.window = 1ms;
  o.min_window_samples = 5;
  o.max_waiters = 3;
  concurrency_limit cl(o);
  constexpr int threads = 4;
  constexpr int rounds = 20'000;
  std::atomic<std::int64_t> clock{0}; // virtual time, in 10 us steps
  std::atomic<std::uint64_t> taken{0}, grants{0}, removals{0}, over_max{0};
  std::atomic<int> held{0};
  auto now = [&] { return duration(clock.fetch_add(1, std::memory_order_relaxed) * 10'000); };
  auto give_back = [&](stress_random& r) {
    held.fetch_sub(1, std::memory_order_relaxed);
    const auto pick = r.next() % 200;
    const limit_signal s = pick == 0 ? limit_signal::drop : pick < 20 ? limit_signal::ignored : limit_signal::sample;
    cl.release(now(), duration(1'000'000 + static_cast<std::int64_t>(r.next() % 4'000'000)), s);
  };
  auto holding = [&] {
    taken.fetch_add(1, std::memory_order_relaxed);
    if (held.fetch_add(1, std::memory_order_relaxed) + 1 > 3) over_max.fetch_add(1, std::memory_order_relaxed);
  };
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      stress_random r{0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(t + 1)};
      stress_waiter w;
      for (int i = 0; i < rounds; ++i) {
        if (r.next() % 2 == 0) {
          if (cl.try_acquire()) {
            holding();
            for (int k = static_cast<int>(r.next() % 8); k > 0; --k) std::this_thread::yield();
            give_back(r);
          }
          continue;
        }
        w.refuse = r.next() % 8 == 0;
        const int accepted_before = w.accepted.load(std::memory_order_relaxed);
        const int announced_before = w.announced.load(std::memory_order_acquire);
        switch (cl.wait(w)) {
        case concurrency_limit::wait_result::acquired:
          holding();
          give_back(r);
          break;
        case concurrency_limit::wait_result::refused: break;
        case concurrency_limit::wait_result::queued: {
          for (int k = static_cast<int>(r.next() % 6); k > 0; --k) std::this_thread::yield();
          if (cl.cancel_wait(w, r.next() % 2 == 0) == concurrency_limit::cancel_result::granted) {
            // The permit is ours; its announcement is on its way.
            while (w.announced.load(std::memory_order_acquire) == announced_before) std::this_thread::yield();
            if (w.accepted.load(std::memory_order_relaxed) != accepted_before + 1) over_max.fetch_add(1000);
            grants.fetch_add(1, std::memory_order_relaxed);
            holding();
            give_back(r);
          } else {
            removals.fetch_add(1, std::memory_order_relaxed);
            if (w.accepted.load(std::memory_order_relaxed) != accepted_before) over_max.fetch_add(1000);
          }
          // Exactly one announcement per grant, none for a removal.
          if (w.announced.load(std::memory_order_acquire) - announced_before > 1) over_max.fetch_add(1000);
          break;
        }
        }
      }
    });
  }
  for (auto& th : workers) th.join();
  CHECK(over_max.load() == 0);
  CHECK(cl.in_flight() == 0);
  CHECK(cl.waiting() == 0);
  CHECK(held.load() == 0);
  const auto totals = cl.totals();
  CHECK(totals.acquired == taken.load());
  CHECK(totals.waited == grants.load() + removals.load());
  CHECK(totals.waited > 0);
  CHECK(grants.load() > 0);
  CHECK(cl.limit() >= 1);
  CHECK(cl.limit() <= 3);
  MESSAGE("taken " << taken.load() << ", waited " << totals.waited << ", granted after a wait " << grants.load()
                   << ", refused " << totals.refused << ", limit at the end " << cl.limit());
}
