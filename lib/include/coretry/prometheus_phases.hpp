#ifndef CORETRY_PROMETHEUS_PHASES_HPP
#define CORETRY_PROMETHEUS_PHASES_HPP

#include <coretry/phases.hpp>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace coretry {

/// A phase_observer (give it to http::request_options::phases) that keeps,
/// per route template and phase, a histogram of the time attempts spent in
/// that phase, and a prometheus-cpp Collectable that hands it over as one
/// metric family:
///
///   coretry_http_phase_duration_seconds{route,phase,le}   histogram
///
/// `phase` is one of pool_wait, lookup, connect, tls, write, first_byte,
/// read. Every phase an attempt reached is recorded, a failed attempt's last
/// one included (with the time until the attempt ended: a pool exhausted
/// until the deadline shows as long pool waits). A (route, phase) pair with
/// no sample yet has no series.
///
/// Buckets (seconds): 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
/// 0.5, 1, 2.5, 5, 10, +Inf. Labels come only from bounded sets: `route` is
/// one of the route templates given at construction, any other counted as
/// "other".
///
/// Thread-safe: recording is a few relaxed atomic additions, with no lock
/// and no allocation, so one instance can serve every request on every
/// thread. Collecting may run at the same time; it reads each counter once.
/// The family is made from those atomics when collected, as the
/// prometheus_observer's are.
class prometheus_phase_histograms final : public phase_observer, public ::prometheus::Collectable {
public:
  /// The upper bounds of the finite buckets.
  static constexpr std::array<duration, 13> bucket_bounds{
      std::chrono::microseconds(1000),   std::chrono::microseconds(2500),   std::chrono::microseconds(5000),
      std::chrono::microseconds(10000),  std::chrono::microseconds(25000),  std::chrono::microseconds(50000),
      std::chrono::microseconds(100000), std::chrono::microseconds(250000), std::chrono::microseconds(500000),
      std::chrono::seconds(1),           std::chrono::microseconds(2500000), std::chrono::seconds(5),
      std::chrono::seconds(10)};

  /// `routes`: the bounded set of route templates. Throws
  /// std::invalid_argument for an empty, reserved ("other") or repeated
  /// route, or a prefix that is not a valid metric name.
  explicit prometheus_phase_histograms(std::vector<std::string> routes, std::string prefix = "coretry");
  ~prometheus_phase_histograms() override;
  prometheus_phase_histograms(const prometheus_phase_histograms&) = delete;
  prometheus_phase_histograms& operator=(const prometheus_phase_histograms&) = delete;

  void attempt_phases(const attempt_phases_event& e) noexcept override;

  /// The histogram family (empty of series until something is recorded).
  std::vector<::prometheus::MetricFamily> Collect() const override;

  /// Appends the exposition text (prometheus::TextSerializer of Collect()).
  void write(std::string& out) const;
  std::string text() const;

private:
  struct route_histograms;
  route_histograms& find(std::string_view route) noexcept;

  std::string prefix_;
  std::vector<std::unique_ptr<route_histograms>> routes_; // the last one is "other"
};

} // namespace coretry

#endif
