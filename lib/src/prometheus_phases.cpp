#include <coretry/prometheus_phases.hpp>

#include <coretry/prometheus.hpp>

#include "prometheus_routes.hpp"

#include <algorithm>
#include <chrono>

namespace coretry {

namespace {
constexpr auto relaxed = std::memory_order_relaxed;
constexpr std::size_t bucket_count = prometheus_phase_histograms::bucket_bounds.size() + 1; // with +Inf
constexpr std::array<std::string_view, bucket_count> bucket_labels{
    "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"};
constexpr std::string_view family_name = "_http_phase_duration_seconds";

/// The first bucket whose bound is at least `d`; the last (+Inf) beyond them.
std::size_t bucket_of(duration d) noexcept {
  const auto& bounds = prometheus_phase_histograms::bucket_bounds;
  return static_cast<std::size_t>(std::lower_bound(bounds.begin(), bounds.end(), d) - bounds.begin());
}
} // namespace

struct prometheus_phase_histograms::route_histograms {
  explicit route_histograms(std::string n) : name(std::move(n)) {}

  struct histogram {
    std::array<std::atomic<std::uint64_t>, bucket_count> buckets{}; ///< each bucket's own count, not cumulative
    std::atomic<std::int64_t> sum_ns{0};
  };

  std::string name;
  std::array<histogram, phase_count> phases{};
};

prometheus_phase_histograms::prometheus_phase_histograms(std::vector<std::string> routes, std::string prefix)
    : prefix_(std::move(prefix)) {
  std::string scratch;
  prometheus_text_writer(scratch).family(prefix_ + std::string{family_name}, "histogram", ""); // checks the name
  detail::check_routes(routes);
  for (auto& route : routes) routes_.push_back(std::make_unique<route_histograms>(std::move(route)));
  routes_.push_back(std::make_unique<route_histograms>("other"));
}

prometheus_phase_histograms::~prometheus_phase_histograms() = default;

prometheus_phase_histograms::route_histograms& prometheus_phase_histograms::find(std::string_view route) noexcept {
  return detail::find_route(routes_, route);
}

void prometheus_phase_histograms::attempt_phases(const attempt_phases_event& e) noexcept {
  route_histograms& r = find(e.route);
  for (std::size_t i = 0; i < phase_count; ++i) {
    const auto spent = e.phases[static_cast<phase>(i)];
    if (!spent) continue;
    auto& h = r.phases[i];
    h.buckets[bucket_of(*spent)].fetch_add(1, relaxed);
    h.sum_ns.fetch_add(spent->count(), relaxed);
  }
}

void prometheus_phase_histograms::write(std::string& out) const {
  prometheus_text_writer writer{out};
  const std::string name = prefix_ + std::string{family_name};
  writer.family(name, "histogram",
                "Time HTTP attempts spent in each phase: waiting for a connection, lookup, connect, TLS handshake, "
                "writing, waiting for the first byte, reading the rest.");
  const std::string bucket = name + "_bucket", sum = name + "_sum", count = name + "_count";
  for (const auto& r : routes_) {
    for (std::size_t i = 0; i < phase_count; ++i) {
      const auto& h = r->phases[i];
      std::array<std::uint64_t, bucket_count> counts{};
      std::uint64_t total = 0;
      for (std::size_t b = 0; b < bucket_count; ++b) total += counts[b] = h.buckets[b].load(relaxed);
      if (total == 0) continue;
      const std::string_view phase_name = to_string(static_cast<phase>(i));
      std::uint64_t cumulative = 0;
      for (std::size_t b = 0; b < bucket_count; ++b) {
        cumulative += counts[b];
        writer.sample(bucket, {{"route", r->name}, {"phase", phase_name}, {"le", bucket_labels[b]}}, cumulative);
      }
      writer.sample(sum, {{"route", r->name}, {"phase", phase_name}},
                    std::chrono::duration<double>(duration(h.sum_ns.load(relaxed))).count());
      writer.sample(count, {{"route", r->name}, {"phase", phase_name}}, total);
    }
  }
}

std::string prometheus_phase_histograms::text() const {
  std::string out;
  write(out);
  return out;
}

} // namespace coretry
