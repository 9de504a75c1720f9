// A user's program that needs the engine alone, with coretry's virtual time
// (coretry::testing) and its Prometheus observer (coretry::prometheus): one
// retry on a manual timer with scripted jitter, then the metrics it left,
// serialized with the program's own prometheus-cpp registry.
#include <coretry/coretry.hpp>
#include <coretry/prometheus.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <iostream>
#include <string>

// The consumer states the mode it expects coretry to impose (or not).
#if !defined(EXPECT_SEPARATE_COMPILATION)
#error "the consumer project must define EXPECT_SEPARATE_COMPILATION to 0 or 1"
#elif EXPECT_SEPARATE_COMPILATION && !defined(BOOST_ASIO_SEPARATE_COMPILATION)
#error "coretry was built with separate compilation but did not pass BOOST_ASIO_SEPARATE_COMPILATION on"
#elif !EXPECT_SEPARATE_COMPILATION && defined(BOOST_ASIO_SEPARATE_COMPILATION)
#error "coretry was built header-only but imposed BOOST_ASIO_SEPARATE_COMPILATION"
#endif

namespace asio = boost::asio;
using namespace std::chrono_literals;
using coretry::testing::manual_timer;

namespace {
int calls = 0;
}

int main() {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  coretry::testing::scripted_random draws{0.5};
  coretry::prometheus_observer metrics({"/answer"});
  coretry::policy p;
  p.backoff.initial_window = 100ms;
  coretry::retry_options options;
  options.safety = coretry::repeat_safety::idempotent;
  options.random = &draws;
  options.observer = &metrics;
  options.operation = "/answer";

  auto attempt = [](coretry::attempt_context<coretry::testing::manual_clock>) -> asio::awaitable<int> {
    manual_timer work(co_await asio::this_coro::executor);
    work.expires_after(10ms);
    co_await work.async_wait(asio::use_awaitable);
    if (++calls == 1) throw boost::system::system_error(asio::error::connection_reset);
    co_return 42;
  };
  std::string report;
  coretry::async_retry<manual_timer>(io.get_executor(), p, options, attempt,
                                     [&](std::exception_ptr e, coretry::outcome<int> result) {
                                       if (e) std::rethrow_exception(e);
                                       report = std::string(coretry::to_string(result.reason)) + " after " +
                                                std::to_string(result.attempts) + " attempts, value " +
                                                std::to_string(result.value.value_or(0));
                                     });
  runner.run();
  // Two 10 ms attempts and a backoff of half the 100 ms window, on virtual time.
  std::cout << report << ", " << std::chrono::duration_cast<std::chrono::milliseconds>(runner.elapsed()).count()
            << " ms virtual\n";
  prometheus::Registry registry;
  prometheus::BuildCounter().Name("consumer_runs_total").Help("Runs.").Register(registry).Add({}).Increment();
  std::vector<prometheus::MetricFamily> families = registry.Collect();
  const prometheus::Collectable& collectable = metrics;
  for (auto& family : collectable.Collect()) families.push_back(std::move(family));
  const std::string text = prometheus::TextSerializer{}.Serialize(families);
  const bool counted = text.find("coretry_attempts_total{route=\"/answer\"} 2\n") != std::string::npos &&
                       text.find("consumer_runs_total 1\n") != std::string::npos;
  std::cout << (counted ? "metrics: 2 attempts counted\n" : "metrics: attempts missing\n" + text);
  return 0;
}
