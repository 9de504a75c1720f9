// Measures what the connection pool's wait queue costs when it is long: an
// origin at its limit with many attempts waiting for a connection, which is
// when cancellations (attempt deadlines, callers giving up) come thickest,
// each one looked up under the pool's lock.
//
//   bench_pool_waiters [rounds=5]
//
// For queues of 100, 1,000 and 10,000 waiters: the time per cancellation,
// cancelled in a shuffled order (the emit: finding the waiter and posting
// its handler; not the handler's run); the time per wake-up, each
// connection given back waking the oldest waiter (with the lease taken
// again, as the woken attempt would); and the time per connection given back
// to a standing queue (every waiter with a deadline, the oldest about to
// give up each time: one waiter refused as too late and the one with the
// most time left woken, on a clock the bench moves). The median of `rounds`.

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

/// ns per connection given back to a standing queue of `n` waiters (even):
/// exchanges take 5 ms of the bench's clock, one is given back every 10 ms,
/// and waiter k must be done 10 k + 12 ms after the start: at each return the
/// oldest has less than two exchanges' time left, the one before it less
/// than one. Each return but the first refuses one waiter; each wakes the
/// newest.
double standing_round(std::size_t n) {
  using namespace std::chrono_literals;
  asio::io_context io;
  clock_type::time_point now = clock_type::now();
  pool_type pool(io.get_executor(), 1, std::chrono::seconds(30), [&now] { return now; });
  std::optional<pool_type::lease> held = pool.try_lease("http://a:80");
  now += 5ms;
  held.reset(); // the estimate: 5 ms
  const clock_type::time_point start = now;
  held.emplace(std::move(*pool.try_lease("http://a:80")));
  std::vector<asio::cancellation_signal> signals(n);
  std::size_t heard = 0, refused = 0;
  for (std::size_t k = 0; k < n; ++k)
    pool.async_wait_for_release(
        "http://a:80", start + std::chrono::milliseconds(10 * k + 12),
        asio::bind_cancellation_slot(signals[k].slot(), [&heard, &refused](boost::system::error_code ec) {
          ++heard;
          if (ec) ++refused;
        }));
  const auto begin = clock_type::now();
  for (std::size_t c = 0; c < n / 2; ++c) {
    now = start + std::chrono::milliseconds(10 * c + 5);
    held.reset();
    now += 5ms;
    held.emplace(std::move(*pool.try_lease("http://a:80")));
  }
  const auto elapsed = clock_type::now() - begin;
  if (pool.stats().waiting != 1) std::abort();
  now += 5ms;
  held.reset(); // the last one is too late by now
  io.poll();
  if (heard != n || refused != n / 2 || pool.stats().waiting != 0) std::abort();
  return std::chrono::duration<double, std::nano>(elapsed).count() / static_cast<double>(n / 2);
}

} // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::mt19937 random(42);
  std::printf("%10s %18s %16s %20s\n", "waiters", "ns per cancel", "ns per wake-up", "ns per standing");
  for (std::size_t n : {100u, 1000u, 10000u}) {
    std::vector<double> cancels, wakes, standing;
    for (int r = 0; r < rounds; ++r) {
      cancels.push_back(cancel_round(n, random));
      wakes.push_back(wake_round(n));
      standing.push_back(standing_round(n));
    }
    std::printf("%10zu %18.0f %16.0f %20.0f\n", n, median(cancels), median(wakes), median(standing));
  }
}
