// The bookstore's per-address series (address_load_families): which
// addresses get a label of their own does not follow the order of a
// lookup's answer (round-robin DNS rotates it), so that a rotated answer
// moves nothing between an address's series and address="other", and an
// address two names share is one series.

#include "bookstore/server_metrics.hpp"

#include <doctest/doctest.h>

#include <boost/asio/ip/address.hpp>

#include <string>
#include <vector>

namespace address_metrics_tests {

using endpoint = boost::asio::ip::tcp::endpoint;

/// 127.0.0.`first` ... 127.0.0.`first + n - 1`, rotated by `by`; each
/// address's requests are its last number.
coretry::http::address_stats listed(unsigned n, unsigned by) {
  coretry::http::address_stats stats;
  for (unsigned i = 0; i < n; ++i) {
    const unsigned octet = 1 + (i + by) % n;
    coretry::http::address_load load;
    load.name = "pricing:8080";
    load.address = endpoint(boost::asio::ip::make_address("127.0.0." + std::to_string(octet)), 8080);
    load.requests = octet;
    stats.spread.push_back(load);
  }
  return stats;
}

/// The requests counter of `address` ("other" or "ip:port"); -1 when absent,
/// and how many series carry that label in `count`.
double requests_of(const std::vector<::prometheus::MetricFamily>& families, const std::string& address,
                   int* count = nullptr) {
  double value = -1;
  int seen = 0;
  for (const auto& family : families)
    if (family.name == "coretry_address_requests_total")
      for (const auto& metric : family.metric)
        for (const auto& label : metric.label)
          if (label.name == "address" && label.value == address) {
            value = metric.counter.value;
            ++seen;
          }
  if (count) *count = seen;
  return value;
}

TEST_CASE("address series: a rotated answer moves nothing into or out of other") {
  using coretry::bookstore::address_load_families;
  const double before = requests_of(address_load_families(listed(20, 0), "pricing"), "other");
  REQUIRE(before > 0);
  for (unsigned by = 1; by < 20; ++by) {
    CAPTURE(by);
    CHECK(requests_of(address_load_families(listed(20, by), "pricing"), "other") == before);
  }
}

TEST_CASE("address series: an address two names share is one series") {
  coretry::http::address_stats stats = listed(2, 0);
  coretry::http::address_load shared = stats.spread[0];
  shared.name = "search:8080";
  shared.requests = 5;
  stats.spread.push_back(shared);
  int series = 0;
  CHECK(requests_of(coretry::bookstore::address_load_families(stats, "pricing"), "127.0.0.1:8080", &series) == 6);
  CHECK(series == 1);
}

} // namespace address_metrics_tests
