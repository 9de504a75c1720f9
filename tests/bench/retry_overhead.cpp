// Measures what the retry machinery costs on the happy path, and what an
// operation costs while it sleeps in backoff.
//
//   bench_retry_overhead [operations=200000] [pending=100000] [row]
//
// With `row` (plain, hedged or backoff) only that row runs, once, after a
// warm-up of a tenth of `operations` (plain, hedged): a fixed amount of work
// to count instructions over, e.g. under valgrind --tool=callgrind, where
// the difference between two counts of operations gives the cost of one.
//
// 1. Happy path: a coroutine awaits a trivial asynchronous operation (it
//    completes through the io_context on the next turn), either directly or
//    through async_retry on a real steady_timer (deadline armed, strand,
//    decision core, outcome). Reports ns per operation and heap allocations
//    per operation (every block taken from the C allocator, Asio's recycled
//    blocks included when its cache misses), interleaved in rounds so both
//    see the same machine.
//    async_retry on the single-threaded io_context runs twice: without a
//    gate and with an open local_gate shared by the round's operations (each
//    success recorded); the ratio of the two is printed after the rows. It
//    runs a third time with an observed attempt limit from a
//    latency_tracker the round's operations share; the ratio to the fixed
//    limit is printed too; and a fourth time with an adaptive concurrency
//    limit the round's operations share (a permit taken and given back, a
//    latency sample recorded, per attempt), with its ratio to none; and a
//    fifth time with hedging configured (one hedge after 50 ms) that never
//    sends a hedge, every operation being over long before, with its ratio
//    to no hedging.
// 2. Backoff: `pending` operations whose first attempt fails, all asleep in a
//    one-hour backoff at once; reports heap bytes per pending operation, then
//    the time to cancel them all and see every handler run.

#include <coretry/coretry.hpp>

#include "heap_hooks.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;

// Heap accounting: every allocation in the process goes through here,
// whether it comes from operator new or straight from the C allocator (Asio's
// recycling allocator takes its blocks with aligned_alloc).
static std::atomic<std::uint64_t> allocations{0};
static std::atomic<std::int64_t> live_bytes{0};

void heap_hooks::taken(std::size_t bytes) noexcept {
  allocations.fetch_add(1, std::memory_order_relaxed);
  live_bytes.fetch_add(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
}
void heap_hooks::given_back(std::size_t bytes) noexcept {
  live_bytes.fetch_sub(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
}

namespace {

using clock_type = std::chrono::steady_clock;

/// A trivial asynchronous operation: completes with (no error, 42) on the next turn.
auto trivial_op(asio::io_context& io) {
  return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code, int)>(
      [&io](auto handler) {
        asio::post(io, [h = std::move(handler)]() mutable { std::move(h)(boost::system::error_code{}, 42); });
      },
      asio::deferred);
}

struct measurement {
  double ns_per_op;
  double allocs_per_op;
};

/// Where the measuring coroutine runs.
enum class context_kind {
  single_threaded, ///< an io_context made for one thread (hint 1): serial already
  shared,          ///< an io_context that may be run by many threads: async_retry makes a strand
  on_strand,       ///< a strand of such an io_context, which async_retry reuses
};

/// Runs `loop` (a coroutine that performs `operations` operations) on a fresh
/// io_context, run by this thread alone whatever its kind.
template <class Loop>
measurement measure(int operations, context_kind kind, Loop loop) {
  asio::io_context io(kind == context_kind::single_threaded ? 1 : BOOST_ASIO_CONCURRENCY_HINT_DEFAULT);
  const auto allocs_before = allocations.load();
  const auto start = clock_type::now();
  if (kind == context_kind::on_strand)
    asio::co_spawn(asio::make_strand(io), loop(io), asio::detached);
  else
    asio::co_spawn(io, loop(io), asio::detached);
  io.run();
  const double ns = std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
  return {ns / operations, double(allocations.load() - allocs_before) / operations};
}

measurement run_direct(int operations) {
  return measure(operations, context_kind::single_threaded, [operations](asio::io_context& io) -> asio::awaitable<void> {
    for (int i = 0; i < operations; ++i) (void)co_await trivial_op(io)(asio::use_awaitable);
  });
}

/// What a hand-written deadline costs: the same operation raced with a
/// steady_timer that cancels it through its cancellation slot.
measurement run_direct_with_deadline(int operations) {
  return measure(operations, context_kind::single_threaded, [operations](asio::io_context& io) -> asio::awaitable<void> {
    asio::steady_timer deadline(io);
    asio::cancellation_signal cancel;
    for (int i = 0; i < operations; ++i) {
      deadline.expires_after(250ms);
      deadline.async_wait([&](boost::system::error_code ec) {
        if (!ec) cancel.emit(asio::cancellation_type::terminal);
      });
      (void)co_await trivial_op(io)(asio::bind_cancellation_slot(cancel.slot(), asio::use_awaitable));
      deadline.cancel();
    }
  });
}

/// Through async_retry, from a coroutine running as `kind` says, telling
/// `gate` (if any) every attempt's result; with `tracker`, every attempt's
/// limit is observed from it (p99.9 x 1.5) and every result recorded into it.
measurement run_retry(int operations, context_kind kind, coretry::retry_gate* gate = nullptr,
                      coretry::latency_tracker* tracker = nullptr, coretry::concurrency_limit* limit = nullptr,
                      unsigned hedges = 0) {
  return measure(operations, kind,
                 [operations, gate, tracker, limit, hedges](asio::io_context& io) -> asio::awaitable<void> {
    coretry::policy p;
    if (tracker) p.observed = coretry::observed_limit{};
    p.hedging.max_hedges = hedges;
    coretry::retry_options options;
    options.safety = coretry::repeat_safety::idempotent;
    options.gate = gate;
    options.tracker = tracker;
    options.limit = limit;
    const auto ex = co_await asio::this_coro::executor;
    for (int i = 0; i < operations; ++i) {
      auto result = co_await coretry::async_retry(
          ex, p, options, [&](const coretry::attempt_context<clock_type>&) { return trivial_op(io); },
          asio::use_awaitable);
      if (!result.succeeded()) std::abort();
    }
  });
}

/// async_retry on the single-threaded io_context with a local_gate that every
/// operation of the run shares. Every attempt succeeds: the gate stays open.
measurement run_retry_with_gate(int operations) {
  coretry::local_gate gate;
  const measurement m = run_retry(operations, context_kind::single_threaded, &gate);
  if (!gate.is_open()) std::abort();
  return m;
}

/// async_retry on the single-threaded io_context with an observed attempt
/// limit, from a latency_tracker every operation of the run shares (default
/// options: snapshots refreshed every 5 ms). Past the warm-up (50
/// successes) every limit is learnt.
measurement run_retry_observed(int operations) {
  coretry::latency_tracker tracker;
  return run_retry(operations, context_kind::single_threaded, nullptr, &tracker);
}

/// async_retry on the single-threaded io_context with an adaptive
/// concurrency limit every operation of the run shares (the defaults: one
/// attempt at a time never waits).
measurement run_retry_limited(int operations) {
  coretry::concurrency_limit limit;
  const measurement m = run_retry(operations, context_kind::single_threaded, nullptr, nullptr, &limit);
  if (limit.in_flight() != 0 || limit.totals().acquired != static_cast<std::uint64_t>(operations)) std::abort();
  return m;
}

/// async_retry on the single-threaded io_context with one hedge configured
/// after the default 50 ms: every operation is over first, so none is sent.
measurement run_retry_hedging_unused(int operations) {
  return run_retry(operations, context_kind::single_threaded, nullptr, nullptr, nullptr, 1);
}

/// The median and quartiles of `b`'s ns/op over `a`'s in back-to-back pairs
/// of `operations`, in alternating order (the machine's speed drifts between
/// rounds far apart in time).
template <class A, class B>
void print_pairs(const char* what, int operations, A a, B b) {
  constexpr int pairs = 21;
  std::vector<double> ratios;
  for (int i = 0; i < pairs; ++i) {
    const bool b_first = i % 2 == 1;
    const measurement first = b_first ? b(operations) : a(operations);
    const measurement second = b_first ? a(operations) : b(operations);
    ratios.push_back(b_first ? first.ns_per_op / second.ns_per_op : second.ns_per_op / first.ns_per_op);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("  %s, %d back-to-back pairs of %d operations: median %.3f x ns/op (quartiles %.3f and %.3f)\n", what,
              pairs, operations, ratios[pairs / 2], ratios[pairs / 4], ratios[3 * pairs / 4]);
}

void bench_backoff(int pending) {
  asio::io_context io(1);
  coretry::policy p;
  p.max_attempts = 2;
  p.overall_deadline = coretry::duration::max();
  p.backoff.jitter = coretry::jitter_kind::none;
  p.backoff.initial_window = 1h;
  p.backoff.max_window = 1h;
  coretry::retry_options options;
  options.safety = coretry::repeat_safety::idempotent;
  std::vector<asio::cancellation_signal> cancels(static_cast<std::size_t>(pending));
  int completed = 0;
  auto failing = [&](const coretry::attempt_context<clock_type>&) {
    return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code)>(
        [&io](auto handler) {
          asio::post(io, [h = std::move(handler)]() mutable { std::move(h)(asio::error::connection_reset); });
        },
        asio::deferred);
  };
  const std::int64_t bytes_before = live_bytes.load();
  for (int i = 0; i < pending; ++i)
    coretry::async_retry(io.get_executor(), p, options, failing,
                         asio::bind_cancellation_slot(cancels[static_cast<std::size_t>(i)].slot(),
                                                      [&](std::exception_ptr, coretry::outcome<std::monostate> r) {
                                                        if (r.reason == coretry::stop_reason::cancelled) ++completed;
                                                      }));
  // Run until every first attempt has failed and every operation sleeps.
  while (io.poll() != 0) {
  }
  const std::int64_t bytes_pending = live_bytes.load() - bytes_before;
  const auto start = clock_type::now();
  for (auto& c : cancels) c.emit(asio::cancellation_type::terminal);
  while (completed < pending) io.run_one();
  const double cancel_ms = std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
  std::printf("backoff: %d operations asleep at once: %.0f heap bytes per pending operation "
              "(%.1f MiB in all); cancelling all took %.1f ms (%.0f ns each), %d handlers ran\n",
              pending, double(bytes_pending) / pending, double(bytes_pending) / (1 << 20), cancel_ms,
              cancel_ms * 1e6 / pending, completed);
}

} // namespace

int main(int argc, char** argv) {
  const int operations = argc > 1 ? std::atoi(argv[1]) : 200'000;
  const int pending = argc > 2 ? std::atoi(argv[2]) : 100'000;
  if (operations <= 0 || pending <= 0) {
    std::fprintf(stderr, "usage: bench_retry_overhead [operations>0] [pending>0]\n");
    return 2;
  }
  if (argc > 3) {
    const std::string_view row = argv[3];
    if (row == "backoff") {
      bench_backoff(pending);
      return 0;
    }
    if (row != "plain" && row != "hedged") {
      std::fprintf(stderr, "row: plain, hedged or backoff\n");
      return 2;
    }
    const auto run = [&](int n) {
      return row == "plain" ? run_retry(n, context_kind::single_threaded) : run_retry_hedging_unused(n);
    };
    run(std::max(1, operations / 10));
    const measurement m = run(operations);
    std::printf("%s: %d operations, %.2f allocations/op\n", argv[3], operations, m.allocs_per_op);
    return 0;
  }
  // Warm up caches and the allocator.
  run_direct(operations / 10);
  run_direct_with_deadline(operations / 10);
  run_retry(operations / 10, context_kind::single_threaded);
  run_retry(operations / 10, context_kind::shared);
  run_retry(operations / 10, context_kind::on_strand);
  run_retry_with_gate(operations / 10);
  run_retry_observed(operations / 10);
  run_retry_limited(operations / 10);
  run_retry_hedging_unused(operations / 10);
  constexpr int rounds = 5;
  constexpr int kinds = 9;
  constexpr int plain = 2; // async_retry, single-threaded io_context, no gate
  constexpr int gated = 5; // the same with a local_gate
  constexpr int observed = 6; // the same with an observed limit
  constexpr int limited = 7;  // the same with a concurrency limit
  constexpr int hedged = 8;   // the same with hedging configured, no hedge sent
  const char* names[kinds] = {"direct co_await", "direct, hand-made deadline",
                              "async_retry, single-threaded io_context", "async_retry, strand per op",
                              "async_retry, caller's strand", "async_retry, single-threaded, local_gate",
                              "async_retry, single-threaded, observed limit",
                              "async_retry, single-threaded, concurrency limit",
                              "async_retry, single-threaded, hedging configured, no hedge sent"};
  measurement sums[kinds] = {};
  double ratio_min = 0, ratio_max = 0; // of the rounds' gate/no-gate ns/op
  double observed_min = 0, observed_max = 0; // of the rounds' observed/fixed limit ns/op
  double limited_min = 0, limited_max = 0;   // of the rounds' limit/no limit ns/op
  double hedged_min = 0, hedged_max = 0;     // of the rounds' hedging configured/none ns/op
  for (int r = 0; r < rounds; ++r) {
    const measurement m[kinds] = {run_direct(operations), run_direct_with_deadline(operations),
                                  run_retry(operations, context_kind::single_threaded),
                                  run_retry(operations, context_kind::shared),
                                  run_retry(operations, context_kind::on_strand),
                                  run_retry_with_gate(operations), run_retry_observed(operations),
                                  run_retry_limited(operations), run_retry_hedging_unused(operations)};
    for (int i = 0; i < kinds; ++i) {
      sums[i].ns_per_op += m[i].ns_per_op / rounds;
      sums[i].allocs_per_op += m[i].allocs_per_op / rounds;
    }
    const double ratio = m[gated].ns_per_op / m[plain].ns_per_op;
    ratio_min = r == 0 ? ratio : std::min(ratio_min, ratio);
    ratio_max = r == 0 ? ratio : std::max(ratio_max, ratio);
    const double observed_ratio = m[observed].ns_per_op / m[plain].ns_per_op;
    observed_min = r == 0 ? observed_ratio : std::min(observed_min, observed_ratio);
    observed_max = r == 0 ? observed_ratio : std::max(observed_max, observed_ratio);
    const double limited_ratio = m[limited].ns_per_op / m[plain].ns_per_op;
    limited_min = r == 0 ? limited_ratio : std::min(limited_min, limited_ratio);
    limited_max = r == 0 ? limited_ratio : std::max(limited_max, limited_ratio);
    const double hedged_ratio = m[hedged].ns_per_op / m[plain].ns_per_op;
    hedged_min = r == 0 ? hedged_ratio : std::min(hedged_min, hedged_ratio);
    hedged_max = r == 0 ? hedged_ratio : std::max(hedged_max, hedged_ratio);
  }
  std::printf("happy path, %d operations x %d interleaved rounds (mean of rounds):\n", operations, rounds);
  for (int i = 0; i < kinds; ++i)
    std::printf("  %-40s %8.1f ns/op  %5.2f allocations/op\n", names[i], sums[i].ns_per_op, sums[i].allocs_per_op);
  std::printf("  local_gate / no gate (single-threaded io_context): %.3f x ns/op (rounds %.3f to %.3f), "
              "%+.2f allocations/op\n",
              sums[gated].ns_per_op / sums[plain].ns_per_op, ratio_min, ratio_max,
              sums[gated].allocs_per_op - sums[plain].allocs_per_op);
  std::printf("  observed / fixed limit (single-threaded io_context): %.3f x ns/op (rounds %.3f to %.3f), "
              "%+.2f allocations/op\n",
              sums[observed].ns_per_op / sums[plain].ns_per_op, observed_min, observed_max,
              sums[observed].allocs_per_op - sums[plain].allocs_per_op);
  std::printf("  concurrency limit / none (single-threaded io_context): %.3f x ns/op (rounds %.3f to %.3f), "
              "%+.2f allocations/op\n",
              sums[limited].ns_per_op / sums[plain].ns_per_op, limited_min, limited_max,
              sums[limited].allocs_per_op - sums[plain].allocs_per_op);
  std::printf("  hedging configured, no hedge sent / none (single-threaded io_context): %.3f x ns/op "
              "(rounds %.3f to %.3f), %+.2f allocations/op\n",
              sums[hedged].ns_per_op / sums[plain].ns_per_op, hedged_min, hedged_max,
              sums[hedged].allocs_per_op - sums[plain].allocs_per_op);
  const auto fixed = [](int n) { return run_retry(n, context_kind::single_threaded); };
  print_pairs("observed / fixed limit", operations / 4, fixed, run_retry_observed);
  print_pairs("concurrency limit / none", operations / 4, fixed, run_retry_limited);
  print_pairs("hedging configured, no hedge sent / none", operations / 4, fixed, run_retry_hedging_unused);
  bench_backoff(pending);
  return 0;
}
