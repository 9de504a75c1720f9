#include "bookstore/server_metrics.hpp"

#include <prometheus/family.h>

#include <algorithm>
#include <map>

namespace coretry::bookstore {

namespace {

// Requests refused while being read, by serving::read_outcome.
constexpr std::array<serving::read_outcome, 5> refusal_reasons{
    serving::read_outcome::header_timeout, serving::read_outcome::idle_timeout,
    serving::read_outcome::header_too_large, serving::read_outcome::body_too_large, serving::read_outcome::malformed};

std::size_t code_index(unsigned code) {
  for (std::size_t i = 0; i + 1 < known_codes.size(); ++i)
    if (known_codes[i] == code) return i;
  return known_codes.size() - 1;
}

// A series without labels: a family of one.
template <class Builder>
auto* scalar(Builder builder, ::prometheus::Registry& registry, const char* name, const char* help) {
  return &builder.Name(name).Help(help).Register(registry).Add({});
}

} // namespace

server_metrics::server_metrics() {
  auto& responses = ::prometheus::BuildCounter()
                        .Name("bookstore_responses_total")
                        .Help("Responses by route template and status code (\"other\": any other code).")
                        .Register(*registry_);
  for (std::size_t r = 0; r < known_routes.size(); ++r)
    for (std::size_t c = 0; c < known_codes.size(); ++c) {
      const std::string code = known_codes[c] ? std::to_string(known_codes[c]) : std::string{"other"};
      responses_[r][c] = &responses.Add({{"route", std::string{known_routes[r]}}, {"code", code}});
    }
  deadline_rejections_ = scalar(::prometheus::BuildCounter(), *registry_, "bookstore_deadline_rejections_total",
                                "Requests answered 504 at once: too little of their deadline left.");
  single_attempt_ = scalar(::prometheus::BuildCounter(), *registry_, "bookstore_single_attempt_requests_total",
                           "Requests served with one downstream attempt because a caller owns the retries.");
  in_flight_ = scalar(::prometheus::BuildGauge(), *registry_, "bookstore_in_flight_requests", "Requests being handled.");
  open_connections_ =
      scalar(::prometheus::BuildGauge(), *registry_, "bookstore_open_connections", "Client connections open.");
  auto& refused = ::prometheus::BuildCounter()
                      .Name("bookstore_refused_requests_total")
                      .Help("Requests refused while being read: timeouts close the connection, too large is answered "
                            "431 or 413, malformed 400.")
                      .Register(*registry_);
  for (const serving::read_outcome reason : refusal_reasons)
    refused_.at(static_cast<std::size_t>(reason)) = &refused.Add({{"cause", std::string{serving::to_string(reason)}}});
  send_timeouts_ = scalar(::prometheus::BuildCounter(), *registry_, "bookstore_send_timeouts_total",
                          "Connections reset because a response had not left the socket within the send timeout.");
  idle_closed_ = scalar(::prometheus::BuildCounter(), *registry_, "bookstore_idle_closed_total",
                        "Idle kept-alive connections closed to admit a new client at the connection cap.");
  accept_errors_ = scalar(::prometheus::BuildCounter(), *registry_, "bookstore_accept_errors_total",
                          "Failures to accept a connection (out of descriptors...), each followed by a pause.");
}

void server_metrics::response(std::size_t route, unsigned code) noexcept {
  responses_[route][code_index(code)]->Increment();
}

void server_metrics::refused(serving::read_outcome cause) noexcept {
  const auto i = static_cast<std::size_t>(cause);
  if (i < refused_.size() && refused_[i] != nullptr) refused_[i]->Increment();
}

std::vector<::prometheus::MetricFamily> server_metrics::collect(std::size_t open_connections) const {
  open_connections_->Set(static_cast<double>(open_connections));
  auto families = registry_->Collect();
  // prometheus-cpp keeps labels sorted by name; the responses' lines keep
  // the order they have always had, route first, for scripts matching them.
  for (auto& family : families)
    if (family.name == "bookstore_responses_total")
      for (auto& metric : family.metric)
        std::stable_partition(metric.label.begin(), metric.label.end(),
                              [](const ::prometheus::ClientMetric::Label& l) { return l.name == "route"; });
  return families;
}

std::vector<::prometheus::MetricFamily> address_load_families(const coretry::http::address_stats& stats,
                                                              const std::string& dependency) {
  using ::prometheus::MetricType;
  if (stats.spread.empty()) return {};
  std::vector<::prometheus::MetricFamily> out{
      {"coretry_address_requests_total", "Calls sent to each address of the dependency.", MetricType::Counter, {}},
      {"coretry_address_outstanding", "Calls in flight to each address of the dependency.", MetricType::Gauge, {}},
      {"coretry_address_cost_seconds",
       "The balancer's cost of each address: its latency estimate times the square root of its calls in flight plus one.",
       MetricType::Gauge, {}}};
  const auto add = [&](const std::string& address, double requests, double outstanding, double cost) {
    for (std::size_t i = 0; i < out.size(); ++i) {
      ::prometheus::ClientMetric sample;
      sample.label = {{"address", address}, {"dependency", dependency}};
      const double value = i == 0 ? requests : i == 1 ? outstanding : cost;
      if (i == 0) sample.counter.value = value;
      else sample.gauge.value = value;
      out[i].metric.push_back(std::move(sample));
    }
  };
  // By address, in the addresses' order (not the list's, which
  // round-robin DNS rotates): the same addresses get the same labels
  // whatever order a lookup gave them in. An address several names share
  // is one series.
  struct totals {
    double requests = 0, outstanding = 0, cost = 0;
    void add(double r, double o, double c) {
      requests += r;
      outstanding += o;
      cost = std::max(cost, c);
    }
  };
  std::map<boost::asio::ip::tcp::endpoint, totals> by_address;
  for (const auto& load : stats.spread)
    by_address[load.address].add(static_cast<double>(load.requests), static_cast<double>(load.outstanding),
                                 load.cost / 1e9);
  totals other;
  std::size_t shown = 0;
  for (const auto& [address, t] : by_address) {
    if (shown < max_address_labels) {
      ++shown;
      add(coretry::http::to_string(address), t.requests, t.outstanding, t.cost);
    } else {
      other.add(t.requests, t.outstanding, t.cost);
    }
  }
  if (by_address.size() > max_address_labels) add("other", other.requests, other.outstanding, other.cost);
  return out;
}

} // namespace coretry::bookstore
