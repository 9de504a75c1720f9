// The overall deadline under load: 1,000 concurrent requests against a slow
// server, waiting for pooled connections, timing out and retrying. Checked on
// times the test measures itself with steady_clock, never on the engine's own
// attempt records:
// - each attempt's real end (the instant the operation hears that the attempt
//   finished, read in the observer) is no later than the deadline that attempt
//   was given (read in the request decorator, which runs inside the attempt)
//   plus `lateness_bound`;
// - no attempt is given a deadline past the overall deadline less the
//   completion reserve, measured from the caller's own clock readings around
//   the call (the engine starts its clock inside the call);
// - the caller's handler runs no later than the overall deadline, measured
//   from just before the call, plus `lateness_bound`.
//
// The bound is what a real clock costs on a loaded machine: the timer's
// handler runs after its expiry, then the cancellation travels through the
// attempt, the socket is closed and the completion is queued behind the other
// operations that expired at about the same instant (hundreds here, on two
// threads). In the dev preset on a 2-core machine running other builds (load
// average 6 to 7), 13 runs (2026-12-01) saw attempt ends at worst 306 ms past
// their deadline and handlers at worst 190 ms past the overall deadline; the
// unsanitized bound, 500 ms, leaves about 1.6 times that. Sanitizers slow
// every step, so their bounds are wider: the tsan preset saw at worst 749 ms
// and 693 ms over 3 runs on the same machine (bound 1,500 ms); ASan costs
// about twice an unsanitized debug build (bound 1,000 ms, not measured). A
// client that let an attempt run to the server's answer would be late by
// about 2,880 ms (the slow half answers after 3,000 ms, the attempt limit is
// 120 ms), past every bound; a process paused (SIGSTOP) for a second fails
// the test, as it should: the guarantee is about time as the caller sees it.

#include <coretry/http/client.hpp>
#include <faults/fault_server.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <deque>
#include <mutex>
#include <thread>

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

#if defined(__SANITIZE_THREAD__)
#define CORETRY_DEADLINE_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CORETRY_DEADLINE_TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CORETRY_DEADLINE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CORETRY_DEADLINE_TEST_ASAN 1
#endif
#endif

// How late past its deadline an attempt may end, and the caller's handler
// may run past the overall deadline (see the comment at the top).
#if defined(CORETRY_DEADLINE_TEST_TSAN)
constexpr coretry::duration lateness_bound = 1500ms;
constexpr const char* build_kind = "ThreadSanitizer";
#elif defined(CORETRY_DEADLINE_TEST_ASAN)
constexpr coretry::duration lateness_bound = 1000ms;
constexpr const char* build_kind = "AddressSanitizer";
#else
constexpr coretry::duration lateness_bound = 500ms;
constexpr const char* build_kind = "unsanitized";
#endif

constexpr unsigned max_recorded_attempts = 8;

/// One operation's attempts, as measured by the test. Written by the attempt
/// (decorator) and the operation (observer) in turn, never concurrently; read
/// after the io_context has stopped.
struct operation_log final : coretry::retry_observer {
  struct attempt_times {
    bool decorated = false;
    bool finished = false;
    steady::time_point began{};    ///< the attempt ran its decorator
    steady::time_point deadline{}; ///< the deadline the attempt was given
    coretry::duration allowance{};
    steady::time_point ended{};    ///< the operation learnt the attempt's end
  };
  std::array<attempt_times, max_recorded_attempts> attempts{};
  unsigned out_of_range = 0;
  steady::time_point submitted{}, call_returned{}, completed{};

  attempt_times* slot(unsigned number) {
    if (number == 0 || number > attempts.size()) {
      ++out_of_range;
      return nullptr;
    }
    return &attempts[number - 1];
  }
  void attempt_finished(const coretry::attempt_finished_event& e) noexcept override {
    const auto now = steady::now();
    if (auto* a = slot(e.record.number)) {
      a->finished = true;
      a->ended = now;
    }
  }
};

double in_ms(coretry::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

} // namespace

TEST_CASE("deadline guarantee: measured attempt ends and completions stay within the deadline") {
  constexpr int operations = 1000;
  asio::io_context server_io(1);
  auto guard = asio::make_work_guard(server_io);
  coretry::faults::fault_server server(server_io);
  std::thread server_thread([&] { server_io.run(); });

  asio::io_context io(2);
  coretry::http::client client(io.get_executor());
  coretry::http::request_options options;
  options.policy = {.overall_deadline = 500ms, .attempt_limit = 120ms, .min_attempt_allowance = 50ms,
                    .completion_reserve = 20ms, .backoff = {.initial_window = 10ms, .max_window = 40ms}};
  options.route = "/slow";
  const coretry::policy& p = options.policy;

  // The operations are submitted while the io_context runs, as a server
  // would: submitted first and run afterwards, the first ones' deadlines
  // would pass before anything ran, which tests the submitting loop.
  auto work = asio::make_work_guard(io);
  std::thread runner_a([&] { io.run(); });
  std::thread runner_b([&] { io.run(); });

  std::deque<operation_log> logs(operations);
  std::deque<coretry::http::request_options> per_operation;
  std::mutex mutex;
  int completions = 0;
  int failures = 0;
  std::size_t recorded_attempts = 0;
  for (int i = 0; i < operations; ++i) {
    operation_log& log = logs[static_cast<std::size_t>(i)];
    coretry::http::request_options& o = per_operation.emplace_back(options);
    o.observer = &log;
    o.decorate = [&log](coretry::http::request&, const coretry::attempt_context<steady>& context) {
      const auto now = steady::now();
      if (auto* a = log.slot(context.number)) {
        a->decorated = true;
        a->began = now;
        a->deadline = context.deadline;
        a->allowance = context.allowance;
      }
    };
    // Half answer long after any attempt's deadline, half in time once a
    // connection is free.
    const std::string url = server.base_url() + (i % 2 ? "/status/200?delay=3000" : "/status/200?delay=20");
    log.submitted = steady::now();
    client.async_send(url, coretry::http::request(beast_http::verb::get, "", 11), o,
                      asio::bind_executor(asio::make_strand(io), [&, done = &log](std::exception_ptr e,
                                                                                  coretry::http::result r) {
                        done->completed = steady::now();
                        std::lock_guard lock(mutex);
                        ++completions;
                        if (e) ++failures;
                        recorded_attempts += r.records.size();
                      }));
    log.call_returned = steady::now();
  }
  work.reset();
  runner_a.join();
  runner_b.join();
  server.stop();
  guard.reset();
  server_thread.join();

  REQUIRE(completions == operations);
  CHECK(failures == 0);
  CHECK(client.stats().leased == 0);

  // Every check is counted here and asserted once below, with the worst case.
  int unmatched = 0;           // an attempt without both measurements
  int given_too_little = 0;    // allowance below the minimum
  int given_past_deadline = 0; // deadline past the overall deadline less the reserve
  int ended_late = 0;          // real end past its own deadline + bound
  int completed_late = 0;      // handler past the overall deadline + bound
  std::size_t measured_attempts = 0;
  std::vector<coretry::duration> attempt_lateness, completion_lateness;
  for (const operation_log& log : logs) {
    CHECK(log.out_of_range == 0);
    for (const auto& a : log.attempts) {
      if (!a.decorated && !a.finished) continue;
      ++measured_attempts;
      if (!a.decorated || !a.finished) {
        ++unmatched;
        continue;
      }
      if (a.allowance < p.min_attempt_allowance) ++given_too_little;
      // The engine reads its start inside the call, so no later than
      // call_returned: this is exact, no tolerance needed.
      if (a.deadline > log.call_returned + p.overall_deadline - p.completion_reserve) ++given_past_deadline;
      const coretry::duration late = a.ended - a.deadline;
      attempt_lateness.push_back(late);
      if (late > lateness_bound) ++ended_late;
    }
    const coretry::duration late = log.completed - (log.submitted + p.overall_deadline);
    completion_lateness.push_back(late);
    if (late > lateness_bound) ++completed_late;
  }
  REQUIRE_FALSE(attempt_lateness.empty());
  std::sort(attempt_lateness.begin(), attempt_lateness.end());
  std::sort(completion_lateness.begin(), completion_lateness.end());
  const auto p99 = [](const std::vector<coretry::duration>& v) { return v[v.size() * 99 / 100]; };
  const coretry::duration worst_attempt = attempt_lateness.back(), worst_completion = completion_lateness.back();
  MESSAGE(std::string(build_kind) << " build, bound " << in_ms(lateness_bound) << " ms; " << operations
                                  << " operations, " << measured_attempts
                                  << " attempts (500 ms deadline, 120 ms per attempt, 20 ms reserve): "
                                  << "attempt end past its own deadline: max " << in_ms(worst_attempt) << " ms, p99 "
                                  << in_ms(p99(attempt_lateness)) << " ms; handler past the overall deadline: max "
                                  << in_ms(worst_completion) << " ms, p99 " << in_ms(p99(completion_lateness))
                                  << " ms");

  CHECK(measured_attempts == recorded_attempts);
  CHECK(unmatched == 0);
  CHECK(given_too_little == 0);
  CHECK(given_past_deadline == 0);
  CHECK_MESSAGE(ended_late == 0, ended_late << " attempts ended more than " << in_ms(lateness_bound)
                                            << " ms past their deadline (worst " << in_ms(worst_attempt) << " ms)");
  CHECK_MESSAGE(completed_late == 0, completed_late << " operations completed more than " << in_ms(lateness_bound)
                                                    << " ms past the overall deadline (worst "
                                                    << in_ms(worst_completion) << " ms)");
}
