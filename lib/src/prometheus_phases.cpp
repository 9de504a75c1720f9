#include <coretry/prometheus_phases.hpp>

#include "prometheus_routes.hpp"

#include <prometheus/check_names.h>
#include <prometheus/client_metric.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace coretry {

namespace {
constexpr auto phase_order = std::memory_order_relaxed;
constexpr std::size_t bucket_count = prometheus_phase_histograms::bucket_bounds.size() + 1; // with +Inf
constexpr std::string_view family_name = "_http_phase_duration_seconds";

/// The first bucket whose bound is at least `d`; the last (+Inf) beyond them.
std::size_t bucket_of(duration d) noexcept {
  const auto& bounds = prometheus_phase_histograms::bucket_bounds;
  return static_cast<std::size_t>(std::lower_bound(bounds.begin(), bounds.end(), d) - bounds.begin());
}

double seconds(duration d) { return std::chrono::duration<double>(d).count(); }
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
  if (prefix_.empty() || !::prometheus::CheckMetricName(prefix_ + std::string{family_name}))
    throw std::invalid_argument("metric prefix '" + prefix_ + "' is not a valid name");
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
    h.buckets[bucket_of(*spent)].fetch_add(1, phase_order);
    h.sum_ns.fetch_add(spent->count(), phase_order);
  }
}

std::vector<::prometheus::MetricFamily> prometheus_phase_histograms::Collect() const {
  ::prometheus::MetricFamily family;
  family.name = prefix_ + std::string{family_name};
  family.help = "Time HTTP attempts spent in each phase: waiting for a connection, lookup, connect, TLS handshake, "
                "writing, waiting for the first byte, reading the rest.";
  family.type = ::prometheus::MetricType::Histogram;
  for (const auto& r : routes_) {
    for (std::size_t i = 0; i < phase_count; ++i) {
      const auto& h = r->phases[i];
      std::array<std::uint64_t, bucket_count> counts{};
      std::uint64_t total = 0;
      for (std::size_t b = 0; b < bucket_count; ++b) total += counts[b] = h.buckets[b].load(phase_order);
      if (total == 0) continue;
      ::prometheus::ClientMetric m;
      m.label = {{"route", r->name}, {"phase", std::string{to_string(static_cast<phase>(i))}}};
      // Cumulative, the finite bounds only: the serializer writes the count
      // as the +Inf bucket.
      std::uint64_t cumulative = 0;
      for (std::size_t b = 0; b + 1 < bucket_count; ++b) {
        cumulative += counts[b];
        m.histogram.bucket.push_back({cumulative, seconds(bucket_bounds[b])});
      }
      m.histogram.sample_count = total;
      m.histogram.sample_sum = seconds(duration(h.sum_ns.load(phase_order)));
      family.metric.push_back(std::move(m));
    }
  }
  std::vector<::prometheus::MetricFamily> families;
  families.push_back(std::move(family));
  return families;
}

void prometheus_phase_histograms::write(std::string& out) const {
  out += ::prometheus::TextSerializer{}.Serialize(Collect());
}

std::string prometheus_phase_histograms::text() const {
  std::string out;
  write(out);
  return out;
}

} // namespace coretry
