// The manual-clock kit itself: users rely on it to test their own retry logic.

#include <coretry/testing/manual_clock.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <doctest/doctest.h>

#include <chrono>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using coretry::testing::manual_clock;
using coretry::testing::manual_runner;
using coretry::testing::manual_timer;

TEST_CASE("manual clock: timers fire in expiry order at exact virtual times") {
  asio::io_context io;
  manual_runner runner(io);
  manual_timer a(io), b(io), c(io);
  std::vector<std::pair<char, manual_clock::duration>> fired;
  a.expires_after(300ms);
  b.expires_after(100ms);
  c.expires_after(100ms);
  a.async_wait([&](auto ec) { fired.emplace_back(ec ? 'x' : 'a', runner.elapsed()); });
  b.async_wait([&](auto) {
    fired.emplace_back('b', runner.elapsed());
    b.expires_after(50ms); // a wait scheduled from inside a handler
    b.async_wait([&](auto) { fired.emplace_back('B', runner.elapsed()); });
  });
  c.async_wait([&](auto) { fired.emplace_back('c', runner.elapsed()); });
  runner.run();
  CHECK(fired == std::vector<std::pair<char, manual_clock::duration>>{
                     {'b', 100ms}, {'c', 100ms}, {'B', 150ms}, {'a', 300ms}});
}

TEST_CASE("manual clock: a simulated hour takes no real hour") {
  asio::io_context io;
  manual_runner runner(io);
  manual_timer t(io);
  int ticks = 0;
  std::function<void(boost::system::error_code)> tick = [&](boost::system::error_code) {
    if (++ticks == 3600) return;
    t.expires_after(1s);
    t.async_wait(tick);
  };
  t.expires_after(1s);
  t.async_wait(tick);
  const auto real_start = std::chrono::steady_clock::now();
  runner.run();
  CHECK(ticks == 3600);
  CHECK(runner.elapsed() == 1h);
  CHECK(std::chrono::steady_clock::now() - real_start < 10s);
}

TEST_CASE("manual clock: cancel, expires_after and per-operation cancellation abort waits") {
  asio::io_context io;
  manual_runner runner(io);
  manual_timer t(io);
  std::vector<boost::system::error_code> results;
  t.expires_after(1s);
  t.async_wait([&](auto ec) { results.push_back(ec); });
  CHECK(t.expires_after(2s) == 1); // resetting the expiry cancels the pending wait
  asio::cancellation_signal signal;
  t.async_wait(asio::bind_cancellation_slot(signal.slot(), [&](auto ec) { results.push_back(ec); }));
  runner.run_for(500ms);
  signal.emit(asio::cancellation_type::total);
  runner.run();
  REQUIRE(results.size() == 2);
  CHECK(results[0] == asio::error::operation_aborted);
  CHECK(results[1] == asio::error::operation_aborted);
  CHECK(runner.elapsed() == 500ms);
}

TEST_CASE("manual clock: run_until stops at the given time") {
  asio::io_context io;
  manual_runner runner(io);
  manual_timer t(io);
  bool fired = false;
  t.expires_after(1s);
  t.async_wait([&](auto) { fired = true; });
  runner.run_until(manual_clock::time_point(999ms));
  CHECK_FALSE(fired);
  CHECK(runner.elapsed() == 999ms);
  runner.run_for(1ms);
  CHECK(fired);
}

TEST_CASE("manual clock: work with nothing pending is reported as a deadlock") {
  asio::io_context io;
  manual_runner runner(io);
  auto guard = asio::make_work_guard(io);
  CHECK_THROWS_AS(runner.run(), coretry::testing::deadlock_error);
}

TEST_CASE("manual clock: destroying a timer aborts its waits") {
  asio::io_context io;
  manual_runner runner(io);
  boost::system::error_code result;
  {
    manual_timer t(io);
    t.expires_after(1s);
    t.async_wait([&](auto ec) { result = ec; });
  }
  runner.run();
  CHECK(result == asio::error::operation_aborted);
  CHECK(runner.elapsed() == 0s);
}
