// The overall deadline under load: 1,000 concurrent requests against a slow
// server, waiting for pooled connections, timing out and retrying. No attempt
// may start after the deadline or be given time past it; how far past its
// deadline each operation completes (the overshoot) is measured and printed,
// not asserted: it depends on the machine.

#include <coretry/http/client.hpp>
#include <faults/fault_server.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <mutex>
#include <thread>

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using namespace std::chrono_literals;

TEST_CASE("deadline guarantee: no attempt starts after the overall deadline") {
  constexpr int operations = 1000;
  asio::io_context server_io(1);
  auto guard = asio::make_work_guard(server_io);
  coretry::faults::fault_server server(server_io);
  std::thread server_thread([&] { server_io.run(); });

  asio::io_context io(2);
  coretry::http::client client(io.get_executor());
  coretry::http::request_options options;
  options.policy.overall_deadline = 500ms;
  options.policy.attempt_limit = 120ms;
  options.policy.min_attempt_allowance = 50ms;
  options.policy.completion_reserve = 20ms;
  options.policy.backoff.initial_window = 10ms;
  options.policy.backoff.max_window = 40ms;
  options.route = "/slow";

  std::mutex mutex;
  std::vector<coretry::duration> overshoots;
  coretry::duration latest{};
  int violations = 0;
  for (int i = 0; i < operations; ++i) {
    // Half answer too late for an attempt, half in time once a connection is free.
    const std::string url = server.base_url() + (i % 2 ? "/status/200?delay=200" : "/status/200?delay=20");
    // Measured as the caller sees it: from the call to the handler running.
    const auto submitted = std::chrono::steady_clock::now();
    client.async_send(url, coretry::http::request(beast_http::verb::get, "", 11), options,
                      asio::bind_executor(asio::make_strand(io), [&, submitted](std::exception_ptr e, coretry::http::result r) {
                        const coretry::duration waited = std::chrono::steady_clock::now() - submitted;
                        CHECK_FALSE(e);
                        const coretry::policy& p = options.policy;
                        int bad = 0;
                        for (const auto& a : r.records)
                          if (a.start >= p.overall_deadline ||
                              a.start + a.allowance > p.overall_deadline - p.completion_reserve ||
                              a.allowance < p.min_attempt_allowance)
                            ++bad;
                        std::lock_guard lock(mutex);
                        violations += bad;
                        latest = std::max(latest, waited);
                        overshoots.push_back(std::max(coretry::duration::zero(), waited - p.overall_deadline));
                      }));
  }
  std::thread helper([&] { io.run(); });
  io.run();
  helper.join();
  server.stop();
  guard.reset();
  server_thread.join();

  REQUIRE(overshoots.size() == static_cast<std::size_t>(operations));
  CHECK(violations == 0);
  CHECK(client.stats().leased == 0);
  std::sort(overshoots.begin(), overshoots.end());
  const auto in_ms = [](coretry::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  MESSAGE("deadline overshoot over " << operations << " operations (500 ms deadline, 20 ms reserve): max "
                                     << in_ms(overshoots.back()) << " ms, p99 "
                                     << in_ms(overshoots[overshoots.size() * 99 / 100]) << " ms; latest completion "
                                     << in_ms(latest) << " ms after its call");
}
