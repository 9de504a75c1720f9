// Measures what taking and giving back a concurrency_limit permit costs.
//
//   bench_concurrency_limit [pairs=20000000]
//
// 1. Uncontended: one thread takes a permit (try_acquire) and gives it back
//    (release, a latency sample: the adaptive rule records it, and closes a
//    window every 100 ms of the virtual time that advances 1 us per pair),
//    `pairs` times; the fastest of five rounds. Reports ns per pair and heap
//    allocations (every block taken from the C allocator), beside the same
//    loop around one relaxed atomic add, for scale. Also with a fixed limit
//    (nothing recorded).
// 2. Contended: two threads doing the same on one limit (limit 1000, so
//    neither is refused); ns per pair per thread (wall time x threads /
//    pairs), and the allocations (the second std::thread's own).
// It measures; it asserts nothing about time.

#include <coretry/concurrency_limit.hpp>

#include "heap_hooks.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

static std::atomic<std::uint64_t> allocations{0};

void heap_hooks::taken(std::size_t) noexcept { allocations.fetch_add(1, std::memory_order_relaxed); }
void heap_hooks::given_back(std::size_t) noexcept {}

namespace {

using clock_type = std::chrono::steady_clock;
using coretry::concurrency_limit;
using coretry::duration;
using namespace std::chrono_literals;

/// Each of `threads` threads takes and gives back pairs / threads permits;
/// returns ns per pair (wall time x threads / pairs) and counts refusals.
double pair_run(concurrency_limit& cl, std::uint64_t pairs, unsigned threads, duration origin,
                std::atomic<std::uint64_t>& refused) {
  std::vector<std::thread> workers;
  const std::uint64_t each = pairs / threads;
  auto work = [&cl, each, origin, &refused](unsigned k) {
    std::uint64_t missed = 0;
    for (std::uint64_t i = 0; i < each; ++i) {
      if (!cl.try_acquire()) {
        ++missed;
        continue;
      }
      const duration now = origin + std::chrono::microseconds(i);
      cl.release(now, duration(10'000'000 + static_cast<std::int64_t>((i * 2654435761u + k) % 5'000'000)),
                 coretry::limit_signal::sample);
    }
    refused.fetch_add(missed, std::memory_order_relaxed);
  };
  const auto start = clock_type::now();
  for (unsigned k = 1; k < threads; ++k) workers.emplace_back(work, k);
  work(0);
  for (auto& w : workers) w.join();
  const double ns = std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
  return ns * threads / double(pairs);
}

} // namespace

int main(int argc, char** argv) {
  const long long pairs = argc > 1 ? std::atoll(argv[1]) : 20'000'000;
  if (pairs < 1000) {
    std::fprintf(stderr, "usage: bench_concurrency_limit [pairs>=1000]\n");
    return 2;
  }
  const auto n = static_cast<std::uint64_t>(pairs);
  constexpr int rounds = 5;
  std::atomic<std::uint64_t> refused{0};
  for (const bool adaptive : {true, false}) {
    concurrency_limit::options o;
    o.adaptive = adaptive;
    o.initial_limit = 100;
    concurrency_limit cl(o);
    pair_run(cl, n / 10, 1, 0s, refused); // warm up
    double best = 1e9;
    std::uint64_t allocated = 0;
    for (int r = 0; r < rounds; ++r) {
      const std::uint64_t before = allocations.load();
      best = std::min(best, pair_run(cl, n / rounds, 1, 1h * (r + 1), refused));
      allocated += allocations.load() - before;
    }
    std::printf("take + give back, 1 thread, %-8s: %6.1f ns/pair (fastest of %d rounds), %llu allocations in %llu "
                "pairs, limit at the end %u\n",
                adaptive ? "adaptive" : "fixed", best, rounds, static_cast<unsigned long long>(allocated),
                static_cast<unsigned long long>(n), cl.limit());
  }
  std::atomic<std::uint64_t> counter{0};
  double floor_ns = 1e9;
  for (int r = 0; r < rounds; ++r) {
    const auto start = clock_type::now();
    for (std::uint64_t i = 0; i < n / rounds; ++i) counter.fetch_add(i & 1, std::memory_order_relaxed);
    floor_ns = std::min(floor_ns, std::chrono::duration<double, std::nano>(clock_type::now() - start).count() /
                                      double(n / rounds));
  }
  std::printf("the same loop around one relaxed atomic add: %.1f ns\n", floor_ns);

  concurrency_limit::options o;
  o.initial_limit = 1000;
  concurrency_limit shared(o);
  refused = 0;
  const std::uint64_t before = allocations.load();
  const double two = pair_run(shared, n, 2, 10h, refused);
  std::printf("take + give back, 2 threads, adaptive: %6.1f ns/pair per thread, %llu allocations (the second "
              "std::thread's own), %llu refused\n",
              two, static_cast<unsigned long long>(allocations.load() - before),
              static_cast<unsigned long long>(refused.load()));
  return 0;
}
