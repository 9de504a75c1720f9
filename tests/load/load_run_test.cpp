// coretry-load against the fault server's capacity route, both in this
// process on one io_context (one thread): open-loop arrivals keep coming
// whatever the answers do, so beyond capacity the queue grows and goodput
// stays at capacity; a request with no free connection is not sent.

#include "load/load_generator.hpp"
#include "load/load_report.hpp"

#include <faults/fault_server.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace std::chrono_literals;
using coretry::load::window_report;

namespace {

coretry::load::plan capacity_plan(unsigned short port, std::vector<coretry::load::phase> phases) {
  coretry::load::plan plan;
  plan.host = "127.0.0.1";
  plan.port = port;
  plan.target = "/capacity/book-1";
  plan.host_field = "127.0.0.1:" + std::to_string(port);
  plan.phases = std::move(phases);
  plan.seed = 1;
  return plan;
}

coretry::faults::fault_server_options capacity_of(std::size_t workers, std::chrono::milliseconds service) {
  coretry::faults::fault_server_options options;
  options.capacity.workers = workers;
  options.capacity.service_time = service;
  return options;
}

} // namespace

TEST_CASE("run: at twice the capacity route's capacity, goodput stays at capacity and nothing is lost") {
  boost::asio::io_context io{1};
  // 2 workers x 10 ms: 200 requests/s.
  coretry::faults::fault_server server{io, capacity_of(2, 10ms)};
  auto plan = capacity_plan(server.port(), {{400, 1s}});
  plan.connections = 1000;
  plan.timeout = 5000ms; // never reached: the queue's longest wait is about 1 s
  plan.window = 250ms;
  std::vector<window_report> windows;
  const auto summary = coretry::load::run_load(io, plan, [&](const window_report& w) {
    windows.push_back(w);
    // Every line a script reads is one JSON object.
    CHECK(boost::json::parse(coretry::load::json_line(w)).as_object().contains("goodput"));
  });
  server.stop();
  io.run_for(2s);

  const window_report& total = summary.totals;
  MESSAGE(coretry::load::table_summary(summary));
  // 400 expected arrivals (sd 20).
  CHECK(total.sent >= 300);
  CHECK(total.sent <= 500);
  CHECK(total.not_sent == 0);
  CHECK(total.errors == 0);
  CHECK(total.timeouts == 0);
  CHECK(total.status_200 == total.sent);
  // Sent at 400/s for a second, answered at 200/s for about two.
  CHECK(total.length >= 1700ms);
  REQUIRE(windows.size() >= 7);
  CHECK(windows[0].phase == 0);
  CHECK(windows[0].rate == 400);
  CHECK(windows.back().phase == 1); // after the last phase: the queue drains

  // Every full window while the queue is loaded (from 250 ms to 1.75 s):
  // 200/s, give or take the timer's lateness and the window's edges.
  double answered = 0;
  double seconds = 0;
  for (const window_report& w : windows) {
    if (w.start < 250ms || w.start + w.length > 1750ms || w.length < 240ms) continue;
    CAPTURE(w.index);
    CHECK(w.goodput() >= 120);
    CHECK(w.goodput() <= 240);
    answered += static_cast<double>(w.status_200);
    seconds += std::chrono::duration<double>(w.length).count();
  }
  REQUIRE(seconds >= 1.0);
  CHECK(answered / seconds >= 170);
  CHECK(answered / seconds <= 215);
  // The queue's wait shows in the latency: the last window's median is far
  // above the first's.
  REQUIRE(windows.front().p50_ms.has_value());
  REQUIRE(windows.back().p50_ms.has_value());
  CHECK(*windows.back().p50_ms > *windows.front().p50_ms + 300);
}

TEST_CASE("run: with every connection busy a request is not sent, and a slow answer times out") {
  boost::asio::io_context io{1};
  // 1 worker x 100 ms, far below the offered 200/s.
  coretry::faults::fault_server server{io, capacity_of(1, 100ms)};
  auto plan = capacity_plan(server.port(), {{200, 500ms}});
  plan.connections = 5;
  plan.timeout = 150ms;
  plan.deadline_header = true;
  plan.window = 100ms;
  std::size_t windows = 0;
  const auto summary = coretry::load::run_load(io, plan, [&](const window_report&) { ++windows; });
  const auto log = server.log();
  server.stop();
  io.run_for(2s);

  const window_report& total = summary.totals;
  MESSAGE(coretry::load::table_summary(summary));
  CHECK(windows >= 5);
  // Never more than 5 in flight: of about 100 arrivals, most find none free.
  CHECK(total.not_sent >= 50);
  CHECK(total.sent + total.not_sent >= 60);
  CHECK(total.timeouts >= 1);
  CHECK(total.status_200 + total.timeouts + total.errors == total.sent);
  // What is left of the 150 ms went with each request.
  REQUIRE_FALSE(log.empty());
  bool seen = false;
  for (const auto& [name, value] : log.front().fields) {
    if (name != "x-coretry-deadline-ms") continue;
    seen = true;
    CHECK(std::stoi(value) >= 1);
    CHECK(std::stoi(value) <= 150);
  }
  CHECK(seen);
}
