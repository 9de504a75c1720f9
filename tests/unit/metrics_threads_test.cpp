// The Prometheus observer and phase histograms recorded into from many
// threads at once.
// Labelled `threads` (coretry_thread_tests), so that ThreadSanitizer runs
// them; each section keeps the names of the cases of the file it names.

#include "test_support.hpp"
#include "phase_samples.hpp"
#include "prometheus_text.hpp"

#include <policies.hpp>

#include <coretry/budget.hpp>
#include <coretry/decision_core.hpp>
#include <coretry/detail/block_cache.hpp>
#include <coretry/detail/deadline_queue.hpp>
#include <coretry/gate.hpp>
#include <coretry/latency_tracker.hpp>
#include <coretry/prometheus.hpp>
#include <coretry/prometheus_phases.hpp>
#include <coretry/with_deadline.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

// ---- from prometheus_test.cpp
namespace threads_from_prometheus {
using namespace std::chrono_literals;
using coretry::attempt_record;
using coretry::prometheus_observer;
using coretry::stop_reason;
using coretry::verdict;
using namespace coretry_tests::prometheus_text;

TEST_SUITE("prometheus observer") {

TEST_CASE("counts from many threads add up") {
  prometheus_observer o{{"r"}};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i)
        run_operation(o, "r", {verdict::transient(i % 2 ? "a" : "b"), verdict::success()}, stop_reason::succeeded);
    });
  for (auto& t : threads) t.join();
  const auto s = parse_samples(o.text());
  CHECK(s.at(R"(coretry_operations_total{route="r"})") == 4000);
  CHECK(s.at(R"(coretry_attempts_total{route="r"})") == 8000);
  CHECK(s.at(R"(coretry_attempt_failures_total{route="r",category="a"})") == 2000);
  CHECK(s.at(R"(coretry_attempt_failures_total{route="r",category="b"})") == 2000);
}

} // TEST_SUITE

} // namespace threads_from_prometheus

// ---- from prometheus_phases_test.cpp
namespace threads_from_prometheus_phases {
using namespace std::chrono_literals;
using coretry::attempt_phases_event;
using coretry::phase;
using coretry::phase_timings;
using coretry::prometheus_phase_histograms;
using namespace coretry_tests::phases;

TEST_CASE("phase histograms: concurrent recording loses nothing") {
  prometheus_phase_histograms h({"/a"});
  const phase_timings p = reused(1ms);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) h.attempt_phases(attempt_phases_event{"/a", 1, p, true, true});
    });
  for (auto& thread : threads) thread.join();
  CHECK(h.text().find("coretry_http_phase_duration_seconds_count{route=\"/a\",phase=\"first_byte\"} 40000") !=
        std::string::npos);
}

} // namespace threads_from_prometheus_phases

