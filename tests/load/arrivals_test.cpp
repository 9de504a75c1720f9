// The arrivals of coretry-load: a Poisson process per phase, from a seed.

#include "load/load_generator.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

using namespace std::chrono_literals;

namespace {

std::vector<coretry::load::arrival_schedule::arrival> all_arrivals(std::vector<coretry::load::phase> phases,
                                                                   std::uint64_t seed) {
  coretry::load::arrival_schedule schedule{std::move(phases), seed};
  std::vector<coretry::load::arrival_schedule::arrival> out;
  while (auto next = schedule.next()) out.push_back(*next);
  return out;
}

} // namespace

TEST_CASE("arrivals: Poisson counts within statistical bounds, the same for the same seed") {
  // 2000/s for 5 s: 10,000 expected, standard deviation 100. Outside +-5 sd
  // with probability below 1e-6.
  const auto arrivals = all_arrivals({{2000, 5s}}, 42);
  CHECK(arrivals.size() >= 9500);
  CHECK(arrivals.size() <= 10500);
  for (std::size_t i = 1; i < arrivals.size(); ++i) REQUIRE(arrivals[i].at >= arrivals[i - 1].at);
  CHECK(arrivals.back().at < 5s);

  // Poisson, not evenly spaced: counts in 100 windows of 50 ms (100 expected
  // in each) vary as much as they average (index of dispersion 1; chi-square
  // with 99 degrees of freedom puts it within 0.6 to 1.5 with probability
  // above 0.999). Evenly spaced arrivals would give about 0.
  std::vector<int> counts(100, 0);
  for (const auto& arrival : arrivals) ++counts[static_cast<std::size_t>(arrival.at / 50ms)];
  double mean = 0;
  for (const int count : counts) mean += count;
  mean /= static_cast<double>(counts.size());
  double variance = 0;
  for (const int count : counts) variance += (count - mean) * (count - mean);
  variance /= static_cast<double>(counts.size() - 1);
  CHECK(variance / mean > 0.6);
  CHECK(variance / mean < 1.5);

  // The same seed gives the same times; another seed others.
  const auto again = all_arrivals({{2000, 5s}}, 42);
  REQUIRE(again.size() == arrivals.size());
  CHECK(again[arrivals.size() / 2].at == arrivals[arrivals.size() / 2].at);
  const auto other = all_arrivals({{2000, 5s}}, 43);
  CHECK((other.size() != arrivals.size() || other[10].at != arrivals[10].at));
}

TEST_CASE("arrivals: each phase at its own rate, a zero rate a pause") {
  // 1000/s for 2 s, nothing for 1 s, 200/s for 3 s: 2000 and 600 expected
  // (sd 45 and 24.5).
  const auto arrivals = all_arrivals({{1000, 2s}, {0, 1s}, {200, 3s}}, 7);
  std::vector<int> per_phase(3, 0);
  for (const auto& arrival : arrivals) {
    ++per_phase[arrival.phase];
    if (arrival.phase == 0) CHECK(arrival.at < 2s);
    if (arrival.phase == 2) CHECK(arrival.at >= 3s);
  }
  CHECK(per_phase[0] >= 2000 - 5 * 45);
  CHECK(per_phase[0] <= 2000 + 5 * 45);
  CHECK(per_phase[1] == 0);
  CHECK(per_phase[2] >= 600 - 5 * 25);
  CHECK(per_phase[2] <= 600 + 5 * 25);
}

TEST_CASE("latencies: the histogram's quantiles are within its 3% buckets") {
  coretry::load::latency_histogram histogram;
  CHECK_FALSE(histogram.quantile_ms(0.5).has_value());
  for (int micros = 1; micros <= 100000; ++micros) histogram.add(std::chrono::microseconds{micros});
  CHECK(histogram.count() == 100000);
  CHECK(std::abs(*histogram.quantile_ms(0.50) - 50.0) < 50.0 * 0.035);
  CHECK(std::abs(*histogram.quantile_ms(0.99) - 99.0) < 99.0 * 0.035);
  CHECK(*histogram.quantile_ms(1.0) <= 100.0 * 1.035);
  histogram.clear();
  histogram.add(std::chrono::hours{1000}); // beyond the last bucket: kept there
  CHECK(histogram.quantile_ms(0.5).has_value());
}
