#ifndef CORETRY_BOOKSTORE_SERVER_METRICS_HPP
#define CORETRY_BOOKSTORE_SERVER_METRICS_HPP

// The bookstore's own series, in a prometheus-cpp registry: responses by
// route and code, refusals, timeouts and the gauges of what it holds. Every
// label set is made at construction, so counting never takes the registry's
// lock or allocates.

#include <coretry/http/addresses.hpp>
#include <serving/serving.hpp>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace coretry::bookstore {

/// Response codes with a series of their own; 0 stands for any other code.
inline constexpr std::array<unsigned, 10> known_codes{200, 400, 404, 405, 413, 431, 502, 503, 504, 0};
/// Route labels of the responses: the book route, /metrics and any other.
inline constexpr std::string_view book_route = "/books/{id}";
inline constexpr std::array<std::string_view, 3> known_routes{book_route, "/metrics", "other"};

/// Addresses of a dependency with series of their own in
/// address_load_families; the rest are summed as address="other".
inline constexpr std::size_t max_address_labels = 16;

/// The load of `dependency`'s spread addresses (the client's
/// address_stats::spread): coretry_address_requests_total,
/// coretry_address_outstanding and coretry_address_cost_seconds, labelled
/// {dependency, address}, one series per address (summed over the names
/// that share it). The max_address_labels lowest addresses (IP, then port)
/// have their own label and the rest are summed as "other": a lookup that
/// gives the same addresses in another order (round-robin DNS) moves
/// nothing between them. A lookup that adds or drops addresses can (an
/// address no longer listed takes its count with it, and a new lower one
/// pushes the highest into "other").
std::vector<::prometheus::MetricFamily> address_load_families(const coretry::http::address_stats& stats,
                                                              const std::string& dependency);

class server_metrics {
public:
  server_metrics();
  server_metrics(const server_metrics&) = delete;
  server_metrics& operator=(const server_metrics&) = delete;

  /// `route` indexes known_routes.
  void response(std::size_t route, unsigned code) noexcept;
  void refused(serving::read_outcome cause) noexcept;
  void deadline_rejection() noexcept { deadline_rejections_->Increment(); }
  void single_attempt() noexcept { single_attempt_->Increment(); }
  void send_timeout() noexcept { send_timeouts_->Increment(); }
  void idle_closed() noexcept { idle_closed_->Increment(); }
  void accept_error() noexcept { accept_errors_->Increment(); }
  void request_started() noexcept { in_flight_->Increment(); }
  void request_finished() noexcept { in_flight_->Decrement(); }

  /// The registry's families; `open_connections` is read when collected.
  std::vector<::prometheus::MetricFamily> collect(std::size_t open_connections) const;

private:
  std::shared_ptr<::prometheus::Registry> registry_ = std::make_shared<::prometheus::Registry>();
  std::array<std::array<::prometheus::Counter*, known_codes.size()>, known_routes.size()> responses_{};
  std::array<::prometheus::Counter*, 8> refused_{}; // by read_outcome; null for an outcome that is no refusal
  ::prometheus::Counter* deadline_rejections_ = nullptr;
  ::prometheus::Counter* single_attempt_ = nullptr;
  ::prometheus::Counter* send_timeouts_ = nullptr;
  ::prometheus::Counter* idle_closed_ = nullptr;
  ::prometheus::Counter* accept_errors_ = nullptr;
  ::prometheus::Gauge* in_flight_ = nullptr;
  ::prometheus::Gauge* open_connections_ = nullptr;
};

} // namespace coretry::bookstore

#endif
