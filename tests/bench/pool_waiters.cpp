// Measures what the connection pool's wait queue costs when it is long: an
// origin at its limit with many attempts waiting for a connection, which is
// when cancellations (attempt deadlines, callers giving up) come thickest,
// each one looked up under the pool's lock.
//
//   bench_pool_waiters [rounds=5]
//
// For queues of 100, 1,000 and 10,000 waiters: the time per cancellation,
// cancelled in a shuffled order (the emit: finding the waiter and posting
// its handler; not the handler's run), and the time per wake-up, each
// connection given back waking the oldest waiter (with the lease taken
// again, as the woken attempt would). The median of `rounds`.

#include "pool.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <vector>

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;

namespace {

struct null_connection {
  bool is_stale() { return false; }
  void close() {}
};

using pool_type = coretry::http::detail::basic_connection_pool<null_connection>;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// ns per cancellation of one of `n` waiters.
double cancel_round(std::size_t n, std::mt19937& random) {
  asio::io_context io;
  pool_type pool(io.get_executor(), 1, std::chrono::seconds(30));
  auto held = pool.try_lease("http://a:80");
  std::vector<asio::cancellation_signal> signals(n);
  std::size_t heard = 0;
  for (auto& s : signals)
    pool.async_wait_for_release("http://a:80",
                                asio::bind_cancellation_slot(s.slot(), [&heard](boost::system::error_code) { ++heard; }));
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), random);
  const auto start = clock_type::now();
  for (std::size_t i : order) signals[i].emit(asio::cancellation_type::terminal);
  const auto elapsed = clock_type::now() - start;
  io.poll();
  if (heard != n) std::abort();
  return std::chrono::duration<double, std::nano>(elapsed).count() / static_cast<double>(n);
}

/// ns per wake-up of the oldest of up to `n` waiters (give back, wake).
double wake_round(std::size_t n) {
  asio::io_context io;
  pool_type pool(io.get_executor(), 1, std::chrono::seconds(30));
  std::optional<pool_type::lease> held = pool.try_lease("http://a:80");
  std::vector<asio::cancellation_signal> signals(n);
  std::size_t heard = 0;
  for (auto& s : signals)
    pool.async_wait_for_release("http://a:80",
                                asio::bind_cancellation_slot(s.slot(), [&heard](boost::system::error_code) { ++heard; }));
  const auto start = clock_type::now();
  for (std::size_t i = 0; i < n; ++i) {
    held.reset();
    held.emplace(std::move(*pool.try_lease("http://a:80")));
  }
  const auto elapsed = clock_type::now() - start;
  io.poll();
  if (heard != n) std::abort();
  return std::chrono::duration<double, std::nano>(elapsed).count() / static_cast<double>(n);
}

} // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::mt19937 random(42);
  std::printf("%10s %18s %16s\n", "waiters", "ns per cancel", "ns per wake-up");
  for (std::size_t n : {100u, 1000u, 10000u}) {
    std::vector<double> cancels, wakes;
    for (int r = 0; r < rounds; ++r) {
      cancels.push_back(cancel_round(n, random));
      wakes.push_back(wake_round(n));
    }
    std::printf("%10zu %18.0f %16.0f\n", n, median(cancels), median(wakes));
  }
}
