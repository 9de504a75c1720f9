// Many operations on a multi-threaded io_context, against every fault kind,
// cancelled at random points (waiting for a connection, resolving,
// connecting, in the TLS handshake, writing, reading, backing off): every
// completion handler runs exactly once, no connection stays leased, the
// client serves every request again afterwards, and no socket outlives the
// run. Meant for the asan and tsan presets as much as dev.
//
// CORETRY_STORM_OPERATIONS sets the number of operations (default 10000);
// CORETRY_STORM_SEED replays a run's random choices.

#include <coretry/http/client.hpp>
#include <faults/fault_server.hpp>

#include "open_sockets.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using namespace std::chrono_literals;

namespace {

int env_or(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : fallback;
}

} // namespace

// Once found an operation that never completed: a cancellation arriving
// between two reads of Beast's http::async_read was lost. The client now
// reads one stream read at a time and the engine repeats a cancellation
// until the attempt ends; this test is what would show a regression.
TEST_CASE("cancellation storm: every handler exactly once, nothing leaks") {
  const int operations = env_or("CORETRY_STORM_OPERATIONS", 10000);
  const int spread_ms = std::max(1, env_or("CORETRY_STORM_SPREAD_MS", 4000));
  const unsigned seed = static_cast<unsigned>(env_or("CORETRY_STORM_SEED", static_cast<int>(std::random_device{}())));
  MESSAGE("storm: " << operations << " operations, CORETRY_STORM_SEED=" << seed);
  const std::size_t sockets_before = coretry_tests::open_sockets();

  asio::io_context server_io(1);
  auto server_guard = asio::make_work_guard(server_io);
  std::optional<coretry::faults::fault_server> plain(std::in_place, server_io);
  coretry::faults::fault_server_options tls_options;
  tls_options.tls = true;
  std::optional<coretry::faults::fault_server> tls(std::in_place, server_io, tls_options);
  const std::string ca_file = std::filesystem::temp_directory_path() / ("coretry-storm-ca-" + std::to_string(seed));
  std::ofstream(ca_file) << tls->ca_certificate_pem();
  std::thread server_thread([&] { server_io.run(); });
  // A port that refuses for the whole run: bound, never listening, so that
  // no other test's server can take it meanwhile.
  asio::ip::tcp::socket refusing(server_io);
  refusing.open(asio::ip::tcp::v4());
  refusing.bind({asio::ip::make_address("127.0.0.1"), 0});
  const unsigned short refused_port = refusing.local_endpoint().port();

  const std::vector<std::string> targets = {
      plain->base_url() + "/status/200",
      plain->base_url() + "/status/503",
      plain->base_url() + "/status/429?retry-after=0",
      plain->base_url() + "/status/200?delay=40",
      plain->base_url() + "/status/200?drip=20:5",
      plain->base_url() + "/status/200?hang-after-headers",
      plain->base_url() + "/status/200?close",
      plain->base_url() + "/status/200?reset",
      "http://127.0.0.1:" + std::to_string(refused_port) + "/refused",
      "https://localhost:" + std::to_string(tls->port()) + "/status/200",
      "https://localhost:" + std::to_string(tls->port()) + "/status/502?delay=20",
  };

  asio::io_context io(4);
  coretry::http::client_options client_options;
  client_options.ca_file = ca_file;
  client_options.max_connections_per_origin = 32; // so that some attempts wait for a connection
  coretry::http::client client(io.get_executor(), client_options);
  coretry::token_bucket_budget budget;
  coretry::retry_counters counters;

  struct operation {
    explicit operation(asio::strand<asio::io_context::executor_type> s) : strand(s), cancel_timer(s) {}
    asio::strand<asio::io_context::executor_type> strand;
    asio::cancellation_signal cancel;
    asio::steady_timer cancel_timer;
    asio::steady_timer start_timer{strand};
    std::atomic<int> completions{0};
    std::string cancelled_at; // where the caller's cancellation found it, if it did
    std::string description; // for the watchdog's report
  };
  std::vector<std::unique_ptr<operation>> ops;
  std::mt19937 random(seed);
  for (int i = 0; i < operations; ++i) {
    auto& op = *ops.emplace_back(std::make_unique<operation>(asio::make_strand(io)));
    const std::string url = targets[random() % targets.size()];
    const bool post = random() % 3 == 0;
    const bool keyed = post && random() % 2 == 0;
    const int cancel_after_ms = random() % 4 == 0 ? -1 : static_cast<int>(random() % 400);
    const bool budgeted = random() % 2 == 0; // the others retry freely, to spend time in backoff
    // Starts spread over `spread_ms`, so that operations meet the pool, the
    // server and each other at every stage rather than all queue at once.
    const int start_ms = static_cast<int>(random() % spread_ms);
    op.description = "#" + std::to_string(i) + (post ? (keyed ? " POST+key " : " POST ") : " GET ") + url +
                     " start@" + std::to_string(start_ms) + "ms cancel@+" + std::to_string(cancel_after_ms) + "ms";
    op.start_timer.expires_after(std::chrono::milliseconds(start_ms));
    op.start_timer.async_wait([&, url, post, keyed, cancel_after_ms, budgeted](boost::system::error_code) {
      coretry::http::request req(post ? beast_http::verb::post : beast_http::verb::get, "", 11);
      if (post) req.body() = "{\"n\":1}";
      coretry::http::request_options options;
      options.policy = {.overall_deadline = 1500ms, .attempt_limit = 300ms, .min_attempt_allowance = 20ms,
                        .completion_reserve = 10ms, .backoff = {.initial_window = 20ms, .max_window = 80ms}};
      options.generate_idempotency_key = keyed;
      options.budget = budgeted ? &budget : nullptr;
      options.observer = &counters;
      options.route = "/storm";
      client.async_send(url, std::move(req), options,
                        asio::bind_cancellation_slot(
                            op.cancel.slot(), asio::bind_executor(op.strand, [&op](std::exception_ptr e,
                                                                                   coretry::http::result r) {
                              CHECK_FALSE(e);
                              op.completions.fetch_add(1);
                              op.cancel_timer.cancel();
                              if (r.reason != coretry::stop_reason::cancelled) return;
                              // An attempt the caller cancelled says so in its
                              // record; otherwise it was cancelled asleep.
                              if (!r.records.empty() && r.records.back().classified.category == "cancelled")
                                op.cancelled_at = r.value ? std::string(coretry::http::to_string(r.value->reached))
                                                          : "attempt";
                              else
                                op.cancelled_at = "backoff";
                            })));
      if (cancel_after_ms >= 0) {
        op.cancel_timer.expires_after(std::chrono::milliseconds(cancel_after_ms));
        op.cancel_timer.async_wait([&op](boost::system::error_code ec) {
          // On the operation's strand, and only while it is pending: a
          // signal emitted after completion reaches handlers of operations
          // that are gone (Asio's contract forbids it).
          if (!ec && op.completions.load() == 0) op.cancel.emit(asio::cancellation_type::terminal);
        });
      }
    });
  }
  // A hang shows up as a report of the operations still pending, not as a
  // silent ctest timeout.
  std::mutex finished_mutex;
  std::condition_variable finished_changed;
  bool finished = false;
  std::thread watchdog([&] {
    std::unique_lock lock(finished_mutex);
    if (finished_changed.wait_for(lock, 150s, [&] { return finished; })) return;
    std::fprintf(stderr, "storm watchdog: still running after 150 s (seed %u); pending operations:\n", seed);
    for (const auto& op : ops)
      if (op->completions.load() == 0) std::fprintf(stderr, "  %s\n", op->description.c_str());
    const auto stats = client.stats();
    std::fprintf(stderr, "pool: %zu open, %zu leased, %zu waiting\n", stats.open, stats.leased, stats.waiting);
    std::abort();
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&] { io.run(); });
  for (auto& t : threads) t.join();
  {
    std::lock_guard lock(finished_mutex);
    finished = true;
  }
  finished_changed.notify_one();
  watchdog.join();

  int wrong = 0;
  for (const auto& op : ops) wrong += op->completions.load() != 1;
  CHECK(wrong == 0);
  const auto stats = client.stats();
  CHECK(stats.leased == 0);
  CHECK(stats.waiting == 0);
  const auto s = counters.read();
  std::uint64_t stops = 0;
  for (auto n : s.stops) stops += n;
  CHECK(stops == static_cast<std::uint64_t>(operations));
  std::string by_reason;
  for (std::size_t i = 0; i < s.stops.size(); ++i)
    if (s.stops[i] != 0)
      by_reason += " " + std::string(coretry::to_string(static_cast<coretry::stop_reason>(i))) + "=" +
                   std::to_string(s.stops[i]);
  MESSAGE("storm stops:" << by_reason << "; attempts " << s.attempts);
  std::map<std::string, int> cancelled_at;
  for (const auto& op : ops)
    if (!op->cancelled_at.empty()) ++cancelled_at[op->cancelled_at];
  std::string where;
  for (const auto& [stage, n] : cancelled_at) where += " " + stage + "=" + std::to_string(n);
  MESSAGE("cancelled while:" << where);
  // The storm reached the stages it is meant to: cancellations that land in
  // I/O and in backoff (resolve, connect and the handshake are too quick on
  // loopback to be hit every run). How many requests succeed during it is
  // reported, not asserted: its pool of 32 connections per origin is meant
  // to be oversubscribed, and on a build or machine slow enough (tsan on a
  // busy runner) nearly every request waits for a connection until its
  // caller gives up.
  CHECK(cancelled_at["reading"] > 0);
  CHECK(cancelled_at["backoff"] > 0);

  // After the storm the same client serves every request again, plain and
  // TLS: no connection place was lost and no origin was left wedged.
  io.restart();
  constexpr int after = 8;
  std::atomic<int> served{0};
  for (int i = 0; i < after; ++i)
    for (const std::string& url : {targets[0], targets[9]}) {
      coretry::http::request_options options;
      options.policy = {.overall_deadline = 10s, .attempt_limit = 5s, .backoff = {.initial_window = 20ms}};
      client.async_send(url, coretry::http::request(beast_http::verb::get, "", 11), options,
                        [&](std::exception_ptr e, coretry::http::result r) {
                          CHECK_FALSE(e);
                          served += r.reason == coretry::stop_reason::succeeded;
                        });
    }
  io.run();
  CHECK(served.load() == 2 * after);
  CHECK(client.stats().leased == 0);

  client.close_idle();
  plain->stop();
  tls->stop();
  server_guard.reset();
  server_thread.join();
  plain.reset();
  tls.reset();
  refusing.close();
  std::filesystem::remove(ca_file);
  CHECK(coretry_tests::open_sockets() == sockets_before); // no socket outlived the storm
}
