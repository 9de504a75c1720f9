#include "latency_samples.hpp"

#include <coretry/latency_tracker.hpp>

#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

using namespace std::chrono_literals;
using coretry::duration;
using coretry::latency_result;
using coretry::latency_tracker;
using namespace coretry_tests::latency;

namespace {
} // namespace

TEST_CASE("latency tracker: a sample reads back as its bucket's upper edge, exactly") {
  CHECK(latency_tracker::upper_edge(0ns) == 0ns);
  CHECK(latency_tracker::upper_edge(127ns) == 127ns); // exact below 128 ns
  CHECK(latency_tracker::upper_edge(128ns) == 129ns); // [128, 129]
  CHECK(latency_tracker::upper_edge(1000ns) == 1007ns);
  CHECK(latency_tracker::upper_edge(1ms) == 1'007'615ns);
  CHECK(latency_tracker::upper_edge(5ms) == 5'046'271ns);
  CHECK(latency_tracker::upper_edge(300ms) == 301'989'887ns);
  CHECK(latency_tracker::upper_edge(-5ms) == 0ns);
  CHECK(latency_tracker::upper_edge(24h) == latency_tracker::longest); // longer counts as the longest
}

TEST_CASE("latency tracker: every value is read at most 1/64 above itself, never below") {
  // Every bucket boundary region from 1 ns to 2^40 ns, swept geometrically
  // with odd steps so that values fall at and between edges.
  for (std::int64_t v = 1; v < latency_tracker::longest.count(); v = v + v / 37 + 1) {
    const duration d(v);
    const duration u = latency_tracker::upper_edge(d);
    REQUIRE(u >= d);
    REQUIRE(static_cast<double>(u.count()) < static_cast<double>(v) * (1.0 + latency_tracker::relative_error));
    REQUIRE(latency_tracker::upper_edge(u) == u);           // the edge is in its own bucket
    REQUIRE(latency_tracker::upper_edge(u + 1ns) > u);      // and the next value is not
  }
}

TEST_CASE("latency tracker: percentiles by nearest rank over successes, read as upper edges") {
  latency_tracker t(uncached());
  for (int ms = 1; ms <= 100; ++ms) t.record(success, std::chrono::milliseconds(ms), 500ms);
  CHECK(t.successes(500ms) == 100);
  CHECK(t.percentile(1, 500ms) == 1'007'615ns);
  CHECK(t.percentile(50, 500ms) == latency_tracker::upper_edge(50ms));
  CHECK(t.percentile(99, 500ms) == latency_tracker::upper_edge(99ms));
  CHECK(t.percentile(99.9, 500ms) == latency_tracker::upper_edge(100ms)); // rank ceil(99.9) = 100
  CHECK(t.percentile(100, 500ms) == latency_tracker::upper_edge(100ms));
  CHECK(t.percentile(250, 500ms) == latency_tracker::upper_edge(100ms)); // clamped to 100
  // Timeouts and failures are not samples: they move no percentile.
  for (int i = 0; i < 50; ++i) t.record(timeout, 2s, 500ms);
  for (int i = 0; i < 50; ++i) t.record(failure, 1ns, 500ms);
  CHECK(t.percentile(50, 500ms) == latency_tracker::upper_edge(50ms));
  CHECK(t.percentile(100, 500ms) == latency_tracker::upper_edge(100ms));
  CHECK(t.successes(500ms) == 100);
}

TEST_CASE("latency tracker: an empty window reads zero") {
  latency_tracker t(uncached());
  const coretry::latency_snapshot s = t.compute(99.9, 3s);
  CHECK(s.percentile == 0ns);
  CHECK(s.successes == 0);
  CHECK_FALSE(s.censored_majority);
  CHECK(s.longest_censored == 0ns);
}

TEST_CASE("latency tracker: samples leave the window when their sub-window is a window old") {
  latency_tracker t(uncached()); // 10 s in 10 sub-windows of 1 s
  t.record(success, 300ms, 500ms);  // period 0
  t.record(success, 5ms, 5500ms);   // period 5
  CHECK(t.successes(9999ms) == 2);
  CHECK(t.percentile(100, 9999ms) == 301'989'887ns);
  CHECK(t.successes(10s) == 1); // period 10: period 0 is out
  CHECK(t.percentile(100, 10s) == 5'046'271ns);
  CHECK(t.successes(14999ms) == 1);
  CHECK(t.successes(15s) == 0); // period 15: period 5 is out
  // A new period's first sample clears the sub-window it reuses.
  t.record(success, 1ms, 20500ms); // period 20, same sub-window as periods 0 and 10
  CHECK(t.successes(20500ms) == 1);
  CHECK(t.percentile(100, 20500ms) == 1'007'615ns);
}

TEST_CASE("latency tracker: a sample a window late is dropped, not counted as new") {
  latency_tracker t(uncached());
  t.record(success, 1ms, 15s);    // period 15, sub-window 5
  t.record(success, 300ms, 5200ms); // period 5, sub-window 5: older than what it holds
  CHECK(t.successes(15s) == 1);
  CHECK(t.percentile(100, 15s) == 1'007'615ns);
  t.record(success, 300ms, 14s); // late, but inside the window: counted
  CHECK(t.successes(15s) == 2);
}

TEST_CASE("latency tracker: censored majority needs more than half of at least ten attempts") {
  latency_tracker t(uncached());
  for (int i = 0; i < 4; ++i) t.record(success, 5ms, 1s);
  for (int i = 0; i < 5; ++i) t.record(timeout, 10ms, 1s);
  auto s = t.compute(99.9, 1s);
  CHECK_FALSE(s.censored_majority); // 5 of 9
  CHECK(s.longest_censored == latency_tracker::upper_edge(10ms));
  t.record(success, 5ms, 1s);
  CHECK_FALSE(t.compute(99.9, 1s).censored_majority); // 5 of 10: not more than half
  t.record(timeout, 20ms, 2s);
  s = t.compute(99.9, 2s);
  CHECK(s.censored_majority); // 6 of 11
  CHECK(s.longest_censored == latency_tracker::upper_edge(20ms));
  CHECK(s.successes == 5);
  CHECK(s.percentile == 5'046'271ns);
  for (int i = 0; i < 2; ++i) t.record(failure, 1ms, 2s);
  CHECK_FALSE(t.compute(99.9, 2s).censored_majority); // 6 of 13: failures are attempts too

  latency_tracker few(uncached());
  for (int i = 0; i < 9; ++i) few.record(timeout, 10ms, 1s);
  CHECK_FALSE(few.compute(99.9, 1s).censored_majority); // 9 of 9, but fewer than 10
  few.record(timeout, 10ms, 1s);
  CHECK(few.compute(99.9, 1s).censored_majority);
  CHECK(few.compute(99.9, 1s).successes == 0);
  CHECK(few.compute(99.9, 11s).longest_censored == 0ns); // gone with its window
}

TEST_CASE("latency tracker: the cached snapshot is refreshed after refresh_interval, per percentile") {
  latency_tracker t; // refresh every 5 ms
  CHECK(t.snapshot(99.9, 1s).successes == 0);
  t.record(success, 5ms, 1s);
  CHECK(t.snapshot(99.9, 1004ms).successes == 0); // still the cached answer
  CHECK(t.snapshot(50, 1004ms).successes == 1);   // another percentile: its own entry
  const auto s = t.snapshot(99.9, 1005ms);
  CHECK(s.successes == 1);
  CHECK(s.percentile == 5'046'271ns);
  CHECK(s == t.compute(99.9, 1005ms));
  // More percentiles than the cache holds are computed on each call.
  t.snapshot(90, 1005ms);
  t.snapshot(95, 1005ms);
  t.record(success, 300ms, 1006ms);
  CHECK(t.snapshot(99, 1006ms).percentile == 301'989'887ns);
  CHECK(t.snapshot(99, 1006ms).successes == 2);
}

TEST_CASE("latency tracker: options are checked") {
  auto rejects = [](latency_tracker::options o, const char* what) {
    try {
      latency_tracker t(o);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find(what) != std::string::npos);
    }
  };
  latency_tracker::options o;
  o.window = 0ns;
  rejects(o, "window");
  o = {};
  o.sub_windows = 0;
  rejects(o, "sub_windows");
  o = {};
  o.sub_windows = 61;
  rejects(o, "sub_windows");
  o = {};
  o.refresh_interval = 11s;
  rejects(o, "refresh_interval");
}
