// The bookstore's /metrics shows where pricing's attempts spent their time:
// one histogram per phase, each counting the attempts that reached it.

#include "bookstore/bookstore.hpp"
#include "bookstore_support.hpp"

#include "faults/test_pki.hpp"
#include "scratch_file.hpp"
#include "server_thread.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using namespace bookstore_tests;
using coretry::test::server_thread;

TEST_SUITE("bookstore") {

TEST_CASE("/metrics has a histogram of each phase of pricing's attempts, counting the attempts that reached it") {
  coretry::faults::fault_server_options tls;
  tls.tls = true;
  tls.pki = coretry::faults::generate_test_pki(); // names localhost
  const coretry::test::scratch_file ca{tls.pki->ca_pem};
  server_thread pricing{tls};
  // A host name (a lookup), https (a handshake), half the calls retried.
  coretry::bookstore::options o =
      options_for("https://localhost:" + std::to_string(pricing->port()) + "/status/503?percent=50");
  o.pricing_ca_file = ca.path;
  bookstore_runner store{o};
  const auto port = port_of(store->base_url());
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) get(port, "/books/" + std::to_string(t * 10 + i));
    });
  for (auto& c : callers) c.join();

  const std::string text = get(port, "/metrics").body;
  const auto samples = parse_metrics(text);
  CHECK(text.find("# TYPE coretry_http_phase_duration_seconds histogram") != std::string::npos);
  const auto log = pricing->log();
  const double attempts = metric(text, R"(coretry_attempts_total{route="/books/{id}"})");
  CHECK(attempts == static_cast<double>(log.size()));
  CHECK(attempts > 40); // some were retried
  std::set<std::uint64_t> connections;
  for (const auto& request : log) connections.insert(request.connection);
  const auto opened = static_cast<double>(connections.size());
  MESSAGE("attempts: " << attempts << ", connections: " << opened);
  // Every attempt asked the pool, wrote, and was answered; only those that
  // opened a connection connected and shook hands. A new connection looks
  // the name up unless a lookup of it is still fresh (lookup_ttl): at least
  // once, at most once per connection (those opened at the same moment each
  // look it up).
  const double lookups = metric(text, R"(coretry_http_phase_duration_seconds_count{route="/books/{id}",phase="lookup"})");
  CHECK(lookups >= 1);
  CHECK(lookups <= opened);
  const std::map<std::string, double> reached{{"pool_wait", attempts}, {"lookup", lookups},      {"connect", opened},
                                              {"tls", opened},         {"write", attempts},     {"first_byte", attempts},
                                              {"read", attempts}};
  for (const auto& [phase, count] : reached) {
    CAPTURE(phase);
    const std::string series = R"(coretry_http_phase_duration_seconds)";
    const std::string labels = R"(route="/books/{id}",phase=")" + phase + "\"";
    CHECK(metric(text, series + "_count{" + labels + "}") == count);
    CHECK(metric(text, series + "_bucket{" + labels + ",le=\"+Inf\"}") == count);
    CHECK(metric(text, series + "_sum{" + labels + "}") > 0);
    // Cumulative buckets: none holds more than the count, and they grow with le.
    std::map<double, double> buckets;
    for (const auto& [key, value] : samples)
      if (key.starts_with(series + "_bucket{" + labels + ",le=\"") && !key.ends_with("\"+Inf\"}")) {
        const auto le = key.find("le=\"") + 4;
        buckets[std::stod(key.substr(le, key.find('"', le) - le))] = value;
      }
    CHECK(buckets.size() == 13);
    double previous = 0;
    for (const auto& [le, value] : buckets) {
      CHECK(value >= previous);
      CHECK(value <= count);
      previous = value;
    }
  }
  // Calls only: the series name the route template, never a path.
  for (const auto& [key, value] : samples)
    if (key.starts_with("coretry_http_phase_duration_seconds")) CHECK(key.find(R"(route="/books/{id}")") != std::string::npos);
}

} // TEST_SUITE
