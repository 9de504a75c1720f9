// The slow tail and hedging, on virtual time: what each hedge delay does to
// the tail latency and to the load on the dependency.
//
//   bench_hedge_tail [requests=20000] [seed=1] [tail_percent=2]
//
// A dependency answers in 1 to 3 ms (uniformly, 2 ms on average), except
// `tail_percent` % of its calls, which take 1 s (every draw per call, from
// the seed). `requests` operations arrive one
// every millisecond, each through coretry::async_retry on a manual timer
// (the engine's own decisions, nothing modelled) with the book-detail
// policy: 3 attempts, 1,000 ms deadline, 250 ms per attempt, full-jitter
// backoff from 100 ms, one shared retry budget (coretry's defaults) and one
// shared latency tracker. Rows: no hedging, a fixed hedge delay, and a delay
// from a percentile of the tracker (one hedge at most in flight).
//
// For each row: p50, p99 and p99.9 of the operations' latencies, the calls
// the dependency received per 100 requests beyond the first (extra load),
// hedges sent, and requests that failed; then a chart of p99 and the extra
// load against the row. Virtual time: the figures depend on the seed only,
// never on the machine.

#include <coretry/coretry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace asio = boost::asio;
using coretry::duration;
using coretry::testing::manual_clock;
using coretry::testing::manual_timer;
using namespace std::chrono_literals;

struct row {
  std::string name;
  unsigned max_hedges = 0;
  duration delay{};
  std::optional<double> percentile;
};

struct row_result {
  duration p50{}, p99{}, p999{};
  double extra_per_100 = 0;
  std::uint64_t hedges = 0;
  unsigned failed = 0;
};

/// The dependency: each call takes 1 to 3 ms, or 1 s for the tail; cancellable.
struct dependency {
  std::mt19937_64 draws;
  double tail;
  std::uint64_t calls = 0;

  asio::awaitable<int> call() {
    ++calls;
    const bool slow = std::uniform_real_distribution<double>(0.0, 1.0)(draws) < tail;
    const auto fast = duration(std::uniform_int_distribution<std::int64_t>(1'000'000, 3'000'000)(draws));
    manual_timer work(co_await asio::this_coro::executor);
    work.expires_after(slow ? duration(1s) : fast);
    auto [ec] = co_await work.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) throw boost::system::system_error(ec);
    co_return 200;
  }
};

duration quantile(std::vector<duration> v, double q) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

row_result run(const row& r, unsigned requests, std::uint64_t seed, double tail) {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  dependency dep{std::mt19937_64(seed), tail};
  coretry::token_bucket_budget budget;
  coretry::latency_tracker tracker;
  coretry::retry_counters counters;
  coretry::testing::seeded_random jitter(seed ^ 0x9e3779b97f4a7c15ULL);

  coretry::policy p; // the book-detail policy
  p.hedging.max_hedges = r.max_hedges;
  if (r.max_hedges > 0) {
    p.hedging.delay = r.delay;
    p.hedging.delay_percentile = r.percentile;
  }
  coretry::retry_options o;
  o.safety = coretry::repeat_safety::idempotent;
  o.budget = &budget;
  o.tracker = &tracker;
  o.observer = &counters;
  o.random = &jitter;

  std::vector<duration> latencies;
  latencies.reserve(requests);
  unsigned failed = 0;
  const auto classify = [](const boost::system::error_code& ec, int) {
    return ec ? coretry::classify_error(ec) : coretry::verdict::success();
  };
  // One operation a millisecond, each started by its own timer.
  std::vector<manual_timer> arrivals;
  arrivals.reserve(requests);
  for (unsigned i = 0; i < requests; ++i) {
    arrivals.emplace_back(io);
    arrivals.back().expires_at(manual_clock::time_point{} + i * duration(1ms));
    arrivals.back().async_wait([&, i](const boost::system::error_code&) {
      const duration start = i * duration(1ms);
      coretry::async_retry<manual_timer>(io.get_executor(), p, o, [&](const auto&) { return dep.call(); }, classify,
                                         [&, start](std::exception_ptr e, coretry::outcome<int> out) {
                                           if (e || out.reason != coretry::stop_reason::succeeded) ++failed;
                                           latencies.push_back(runner.elapsed() - start);
                                         });
    });
  }
  runner.run();
  row_result result;
  result.p50 = quantile(latencies, 0.50);
  result.p99 = quantile(latencies, 0.99);
  result.p999 = quantile(latencies, 0.999);
  result.extra_per_100 = 100.0 * static_cast<double>(dep.calls - requests) / requests;
  result.hedges = counters.read().hedges_sent;
  result.failed = failed;
  return result;
}

double ms_of(duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

/// A bar of `value` against `full`, at most 40 characters.
std::string bar(double value, double full) {
  const int n = full <= 0 ? 0 : static_cast<int>(40.0 * std::min(value, full) / full + 0.5);
  return std::string(static_cast<std::size_t>(n), '#');
}

bool parse(const char* text, auto& value) {
  const std::string_view s{text};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  return ec == std::errc{} && end == s.data() + s.size();
}

} // namespace

int main(int argc, char** argv) {
  unsigned requests = 20000;
  std::uint64_t seed = 1;
  double tail_percent = 2;
  if ((argc > 1 && (!parse(argv[1], requests) || requests < 1 || requests > 1'000'000)) ||
      (argc > 2 && !parse(argv[2], seed)) ||
      (argc > 3 && (!parse(argv[3], tail_percent) || !(tail_percent >= 0 && tail_percent <= 100))) || argc > 4) {
    std::fprintf(stderr, "usage: bench_hedge_tail [requests 1-1000000] [seed] [tail_percent 0-100]\n");
    return 2;
  }
  std::vector<row> rows{{"none", 0, {}, {}}};
  for (int ms : {5, 10, 20, 50, 100}) rows.push_back({"fixed " + std::to_string(ms) + " ms", 1, duration(ms * 1ms), {}});
  for (double q : {50.0, 90.0, 95.0, 99.0})
    rows.push_back({"p" + std::to_string(static_cast<int>(q)), 1, duration(50ms), q});

  std::printf("bench_hedge_tail: %u requests, 1 a ms; answers in 1-3 ms, %.1f%% in 1 s; seed %llu\n", requests,
              tail_percent, static_cast<unsigned long long>(seed));
  std::printf("%-14s %9s %9s %9s %14s %8s %7s\n", "hedge delay", "p50 ms", "p99 ms", "p99.9 ms", "extra/100 req",
              "hedges", "failed");
  std::vector<row_result> results;
  for (const row& r : rows) {
    results.push_back(run(r, requests, seed, tail_percent / 100.0));
    const row_result& x = results.back();
    std::printf("%-14s %9.1f %9.1f %9.1f %14.2f %8llu %7u\n", r.name.c_str(), ms_of(x.p50), ms_of(x.p99),
                ms_of(x.p999), x.extra_per_100, static_cast<unsigned long long>(x.hedges), x.failed);
  }
  double worst_p99 = 0, worst_extra = 0;
  for (const row_result& x : results) {
    worst_p99 = std::max(worst_p99, ms_of(x.p99));
    worst_extra = std::max(worst_extra, x.extra_per_100);
  }
  std::printf("\np99 (ms), bars against %.1f ms\n", worst_p99);
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::printf("%-14s %8.1f %s\n", rows[i].name.c_str(), ms_of(results[i].p99), bar(ms_of(results[i].p99), worst_p99).c_str());
  std::printf("\nextra calls per 100 requests, bars against %.2f\n", worst_extra);
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::printf("%-14s %8.2f %s\n", rows[i].name.c_str(), results[i].extra_per_100,
                bar(results[i].extra_per_100, worst_extra).c_str());
  return 0;
}
