// Measures what recording into a latency_tracker costs, and what reading
// its percentile costs.
//
//   bench_latency_tracker [records=20000000]
//
// 1. Recording: `records` successes with latencies spread over 1 ms to
//    1 s, into a tracker with the default options (10 s in 10 sub-windows),
//    time advancing 1 us per record, so that every sub-window is rotated
//    (cleared) about twice over the run; on one thread, then on two threads
//    sharing the tracker. Reports ns per record and heap allocations per
//    record (every block taken from the C allocator).
// 2. Reading: compute() (a scan of the full window) and snapshot() served
//    from the cache.

#include <coretry/latency_tracker.hpp>

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
using coretry::duration;
using namespace std::chrono_literals;

// Latencies from a fixed sequence (a multiplicative hash of the index),
// so that records land in many buckets and no two runs differ.
duration latency_of(std::uint64_t i) noexcept {
  return duration(1'000'000 + static_cast<std::int64_t>((i * 0x9E3779B97F4A7C15ull) >> 34) % 999'000'000);
}

/// Each of `threads` threads records records / threads samples; returns ns per record (wall time x threads / records).
double record_run(coretry::latency_tracker& t, std::uint64_t records, unsigned threads, duration origin) {
  std::vector<std::thread> workers;
  const std::uint64_t each = records / threads;
  auto work = [&t, each, origin](unsigned k) {
    for (std::uint64_t i = 0; i < each; ++i)
      t.record(coretry::latency_result::success, latency_of(i * 4 + k), origin + std::chrono::microseconds(i));
  };
  const auto start = clock_type::now();
  // One thread: this one (a std::thread would allocate its own state).
  for (unsigned k = 1; k < threads; ++k) workers.emplace_back(work, k);
  work(0);
  for (auto& w : workers) w.join();
  const double ns = std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
  return ns / double(each);
}

} // namespace

int main(int argc, char** argv) {
  const long long records = argc > 1 ? std::atoll(argv[1]) : 20'000'000;
  if (records < 1000) {
    std::fprintf(stderr, "usage: bench_latency_tracker [records>=1000]\n");
    return 2;
  }
  const auto n = static_cast<std::uint64_t>(records);
  coretry::latency_tracker tracker;
  record_run(tracker, n / 10, 1, 0s); // warm up
  // The fastest of five rounds: on a busy machine a round's mean mostly
  // measures the other programs.
  constexpr int rounds = 5;
  double one = 1e9;
  std::uint64_t allocated = 0;
  for (int r = 0; r < rounds; ++r) {
    const std::uint64_t before = allocations.load();
    one = std::min(one, record_run(tracker, n / rounds, 1, 1h * (r + 1)));
    allocated += allocations.load() - before;
  }
  // The same loop around one relaxed atomic add, for scale.
  std::atomic<std::uint64_t> counter{0};
  double floor_ns = 1e9;
  for (int r = 0; r < rounds; ++r) {
    const auto start = clock_type::now();
    for (std::uint64_t i = 0; i < n / rounds; ++i)
      counter.fetch_add(static_cast<std::uint64_t>(latency_of(i).count()) & 1, std::memory_order_relaxed);
    floor_ns = std::min(floor_ns, std::chrono::duration<double, std::nano>(clock_type::now() - start).count() /
                                      double(n / rounds));
  }
  std::printf("record, 1 thread:  %6.1f ns/record (fastest of %d rounds), %llu allocations in %llu records; "
              "the same loop around one relaxed atomic add: %.1f ns\n",
              one, rounds, static_cast<unsigned long long>(allocated), static_cast<unsigned long long>(n), floor_ns);
  const std::uint64_t before2 = allocations.load();
  const double two = record_run(tracker, n, 2, 10h);
  std::printf("record, 2 threads: %6.1f ns/record per thread (wall time per record each thread made), "
              "%llu allocations (the second std::thread's own)\n",
              two, static_cast<unsigned long long>(allocations.load() - before2));

  // Reading: a window full of samples (the last run's).
  const duration now = 10h + std::chrono::microseconds(n / 2 - 1);
  constexpr int scans = 200;
  auto start = clock_type::now();
  std::uint64_t sink = 0;
  for (int i = 0; i < scans; ++i) sink += static_cast<std::uint64_t>(tracker.compute(99.9, now).percentile.count());
  const double scan_us = std::chrono::duration<double, std::micro>(clock_type::now() - start).count() / scans;
  constexpr int reads = 10'000'000;
  start = clock_type::now();
  for (int i = 0; i < reads; ++i) sink += tracker.snapshot(99.9, now).successes;
  const double read_ns = std::chrono::duration<double, std::nano>(clock_type::now() - start).count() / reads;
  std::printf("compute (a scan of the window): %.1f us; snapshot from the cache: %.1f ns (%llu)\n", scan_us, read_ns,
              static_cast<unsigned long long>(sink % 10));
  return 0;
}
