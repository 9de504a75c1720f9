// The HTTP phase histograms' exposition text: exact lines for phases of
// known length, bounded route labels, bad construction arguments refused.

#include "phase_samples.hpp"

#include <coretry/prometheus_phases.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using coretry::attempt_phases_event;
using coretry::phase;
using coretry::phase_timings;
using coretry::prometheus_phase_histograms;
using namespace coretry_tests::phases;

namespace {


bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

} // namespace

TEST_CASE("phase histograms: each reached phase in its bucket, cumulative, with sum and count") {
  prometheus_phase_histograms h({"/books/{id}"});
  const phase_timings fast = reused(20ms), slow = reused(3s);
  h.attempt_phases(attempt_phases_event{"/books/{id}", 1, fast, true, true});
  h.attempt_phases(attempt_phases_event{"/books/{id}", 1, slow, true, true});
  const std::string text = h.text();
  INFO(text);
  CHECK(text.starts_with("# HELP coretry_http_phase_duration_seconds "));
  CHECK(has_line(text, "# TYPE coretry_http_phase_duration_seconds histogram"));
  const std::string first_byte = "coretry_http_phase_duration_seconds_bucket{route=\"/books/{id}\",phase=\"first_byte\",";
  CHECK(has_line(text, first_byte + "le=\"0.01\"} 0"));
  CHECK(has_line(text, first_byte + "le=\"0.025\"} 1"));
  CHECK(has_line(text, first_byte + "le=\"2.5\"} 1"));
  CHECK(has_line(text, first_byte + "le=\"5\"} 2"));
  CHECK(has_line(text, first_byte + "le=\"+Inf\"} 2"));
  CHECK(has_line(text, "coretry_http_phase_duration_seconds_sum{route=\"/books/{id}\",phase=\"first_byte\"} 3.02"));
  CHECK(has_line(text, "coretry_http_phase_duration_seconds_count{route=\"/books/{id}\",phase=\"first_byte\"} 2"));
  // A bound is inclusive: 1 ms of waiting is in the 1 ms bucket.
  CHECK(has_line(text, "coretry_http_phase_duration_seconds_bucket{route=\"/books/{id}\",phase=\"pool_wait\",le=\"0.001\"} 2"));
  CHECK(has_line(text, "coretry_http_phase_duration_seconds_bucket{route=\"/books/{id}\",phase=\"write\",le=\"0.001\"} 2"));
  CHECK(has_line(text, "coretry_http_phase_duration_seconds_bucket{route=\"/books/{id}\",phase=\"read\",le=\"0.0025\"} 0"));
  CHECK(has_line(text, "coretry_http_phase_duration_seconds_bucket{route=\"/books/{id}\",phase=\"read\",le=\"0.005\"} 2"));
  // Phases no attempt reached have no series.
  CHECK(text.find("phase=\"connect\"") == std::string::npos);
  CHECK(text.find("phase=\"lookup\"") == std::string::npos);
  CHECK(text.find("phase=\"tls\"") == std::string::npos);
  // Every line is a comment or a sample with 14 buckets per series.
  std::size_t buckets = 0;
  for (std::size_t at = text.find("_bucket{"); at != std::string::npos; at = text.find("_bucket{", at + 1)) ++buckets;
  CHECK(buckets == 4 * 14);
}

TEST_CASE("phase histograms: a failed attempt's phases, and beyond the last bound") {
  prometheus_phase_histograms h({"/books/{id}"});
  phase_timings p;
  p.enter(phase::pool_wait, origin);
  p.finish(origin + 12s); // never got a connection
  h.attempt_phases(attempt_phases_event{"/books/{id}", 2, p, false, false});
  const std::string text = h.text();
  CHECK(has_line(text, "coretry_http_phase_duration_seconds_bucket{route=\"/books/{id}\",phase=\"pool_wait\",le=\"10\"} 0"));
  CHECK(has_line(text, "coretry_http_phase_duration_seconds_bucket{route=\"/books/{id}\",phase=\"pool_wait\",le=\"+Inf\"} 1"));
  CHECK(has_line(text, "coretry_http_phase_duration_seconds_sum{route=\"/books/{id}\",phase=\"pool_wait\"} 12"));
}

TEST_CASE("phase histograms: routes are bounded, the prefix is checked") {
  prometheus_phase_histograms h({"/a"}, "shop");
  const phase_timings p = reused(1ms);
  h.attempt_phases(attempt_phases_event{"/a?user=42", 1, p, true, true});
  const std::string text = h.text();
  CHECK(text.find("route=\"other\"") != std::string::npos);
  CHECK(text.find("user=42") == std::string::npos);
  CHECK(text.find("shop_http_phase_duration_seconds_count{route=\"other\",phase=\"read\"} 1") != std::string::npos);
  CHECK_THROWS_AS(prometheus_phase_histograms({"/a", "/a"}), std::invalid_argument);
  CHECK_THROWS_AS(prometheus_phase_histograms({""}), std::invalid_argument);
  CHECK_THROWS_AS(prometheus_phase_histograms({"other"}), std::invalid_argument);
  CHECK_THROWS_AS(prometheus_phase_histograms({"/a"}, "no spaces"), std::invalid_argument);
}
