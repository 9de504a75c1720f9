// Measures what choosing an address costs: basic_balancer::pick over 1, 2,
// 4 and 16 addresses of a name, with estimates and requests in flight
// spread, every address a candidate and none avoided. Two cases: a steady
// state (every weight full: two uniform draws) and one address in slow start
// (draws in proportion to the weights: a scan of the candidates). The
// random source is a splitmix64 generator the bench owns, called directly.
//
//   bench_balancer [picks=2000000] [rounds=5]
//
// Prints ns per pick, the median of `rounds`. Build it optimised (the
// release preset) for figures worth comparing.

#include "balancer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
using time_point = clock_type::time_point;
using balancer_type = coretry::http::detail::basic_balancer<time_point>;

struct splitmix {
  std::uint64_t state;
  std::uint64_t uniform(std::uint64_t m) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return m == UINT64_MAX ? z : static_cast<std::uint64_t>((static_cast<unsigned __int128>(z) * (m + 1)) >> 64);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// ns per pick among `n` addresses; `slow_start`: the last one just returned.
double pick_round(std::size_t n, bool slow_start, long picks) {
  const time_point t0 = time_point{} + std::chrono::hours(1000);
  balancer_type b;
  b.assign(n, t0 - std::chrono::seconds(60));
  for (std::size_t i = 0; i < n; ++i) {
    b.observe(i, std::chrono::milliseconds(5 + static_cast<long>(i % 7)), t0);
    for (std::size_t k = 0; k < i % 3; ++k) b.started(i);
  }
  if (slow_start) b.returned(n - 1, t0);
  const coretry::http::detail::address_set all =
      n >= 64 ? ~coretry::http::detail::address_set{0} : (coretry::http::detail::address_set{1} << n) - 1;
  splitmix random{n * 1000 + slow_start};
  std::uint64_t sink = 0;
  const time_point now = t0 + std::chrono::milliseconds(500);
  const auto start = clock_type::now();
  for (long i = 0; i < picks; ++i) sink += *b.pick(all, 0, now, random);
  const auto elapsed = clock_type::now() - start;
  if (sink == UINT64_MAX) std::puts(""); // keeps the picks
  return std::chrono::duration<double, std::nano>(elapsed).count() / static_cast<double>(picks);
}

} // namespace

int main(int argc, char** argv) {
  const long picks = argc > 1 ? std::atol(argv[1]) : 2000000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  if (picks <= 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: bench_balancer [picks>0] [rounds>0]\n");
    return 2;
  }
  std::printf("%-10s %14s %22s\n", "addresses", "ns/pick", "ns/pick (slow start)");
  for (std::size_t n : {1, 2, 4, 16}) {
    std::vector<double> steady, slow;
    for (int r = 0; r < rounds; ++r) {
      steady.push_back(pick_round(n, false, picks));
      slow.push_back(pick_round(n, true, picks));
    }
    std::printf("%-10zu %14.1f %22.1f\n", n, median(steady), median(slow));
  }
  return 0;
}
