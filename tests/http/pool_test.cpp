// The connection pool without sockets: fake connections, virtual time.

#include "pool.hpp"

#include <coretry/testing/manual_clock.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using coretry::testing::manual_clock;

namespace {

/// A connection that only remembers what was done to it.
struct fake_connection {
  fake_connection(int n, std::vector<int>& closed_log) : id(n), closed(&closed_log) {}
  bool is_stale() {
    ++stale_checks;
    return stale;
  }
  void close() { closed->push_back(id); }

  int id;
  std::vector<int>* closed;
  bool stale = false;
  int stale_checks = 0;
};

using pool_type = coretry::http::detail::basic_connection_pool<fake_connection, manual_clock>;
using lease_type = pool_type::lease;

struct pool_harness {
  explicit pool_harness(std::size_t max_per_origin = 2, coretry::duration idle_timeout = 30s)
      : runner(io), pool(io.get_executor(), max_per_origin, idle_timeout, [this] { return runner.now(); }) {}

  /// Leases from `origin` (which must succeed) and gives it a new connection
  /// unless it got an idle one.
  lease_type take(const std::string& origin) {
    std::optional<lease_type> held = pool.try_lease(origin);
    REQUIRE(held);
    if (!held->get()) held->attach(std::make_unique<fake_connection>(next_id++, closed));
    return std::move(*held);
  }

  /// Queues a waiter for `origin` that records `name` and its error.
  void wait(const std::string& origin, int name, asio::cancellation_slot slot = {}) {
    pool.async_wait_for_release(origin, asio::bind_cancellation_slot(slot, [this, name](boost::system::error_code ec) {
                                  woken.push_back(name);
                                  errors.push_back(ec);
                                }));
  }

  /// As wait(), for an attempt that has `left` from now.
  void wait_with(const std::string& origin, int name, coretry::duration left, asio::cancellation_slot slot = {}) {
    pool.async_wait_for_release(origin, runner.now() + left,
                                asio::bind_cancellation_slot(slot, [this, name](boost::system::error_code ec) {
                                  woken.push_back(name);
                                  errors.push_back(ec);
                                }));
  }

  /// Holds a lease of `origin` for `d` of virtual time and gives it back
  /// reusable: one exchange of that length, for the pool's estimate.
  void exchange_of(const std::string& origin, coretry::duration d) {
    lease_type held = take(origin);
    runner.run_for(d);
    held.mark_reusable();
  }

  asio::io_context io;
  coretry::testing::manual_runner runner;
  std::vector<int> closed;
  int next_id = 1;
  pool_type pool;
  std::vector<int> woken;
  std::vector<boost::system::error_code> errors;
};

} // namespace

TEST_CASE("pool: the first lease is a permit to open one and a connection given back clean is leased again") {
  pool_harness h;
  {
    std::optional<lease_type> first = h.pool.try_lease("http://a:80");
    REQUIRE(first);
    CHECK(first->get() == nullptr); // nothing idle: a permit
    CHECK(h.pool.stats().leased == 1);
    first->attach(std::make_unique<fake_connection>(7, h.closed));
    first->mark_reusable();
  }
  auto stats = h.pool.stats();
  CHECK(stats.idle == 1);
  CHECK(stats.leased == 0);
  CHECK(stats.open == 1);

  std::optional<lease_type> again = h.pool.try_lease("http://a:80");
  REQUIRE(again);
  REQUIRE(again->get());
  CHECK(again->get()->id == 7);
  CHECK(again->get()->stale_checks == 1); // looked at before reuse
  CHECK(h.closed.empty());
  CHECK(h.pool.stats().idle == 0);
}

TEST_CASE("pool: at the limit per origin, waiters are served in the order they came") {
  pool_harness h(2);
  std::optional<lease_type> a(h.take("http://a:80"));
  std::optional<lease_type> b(h.take("http://a:80"));
  CHECK_FALSE(h.pool.try_lease("http://a:80"));
  CHECK(h.pool.try_lease("http://other:80")); // another origin has its own limit

  h.wait("http://a:80", 1);
  h.wait("http://a:80", 2);
  h.wait("http://a:80", 3);
  h.runner.run_ready();
  CHECK(h.woken.empty());
  CHECK(h.pool.stats().waiting == 3);

  a->mark_reusable();
  a.reset();
  h.runner.run_ready();
  CHECK(h.woken == std::vector<int>{1});
  CHECK(h.pool.stats().waiting == 2);
  std::optional<lease_type> for_first = h.pool.try_lease("http://a:80");
  REQUIRE(for_first);
  REQUIRE(for_first->get());
  CHECK(for_first->get()->id == 1); // the connection given back

  b.reset(); // not reusable: closed, and its permit passes on
  h.runner.run_ready();
  CHECK(h.woken == std::vector<int>{1, 2});
  CHECK(h.closed == std::vector<int>{2});
  CHECK(h.pool.stats().waiting == 1);
  for (const auto& ec : h.errors) CHECK_FALSE(ec);
}

TEST_CASE("pool: a waiter's cancellation takes it out of the queue, and the next is served") {
  pool_harness h(1);
  std::optional<lease_type> held(h.take("http://a:80"));
  asio::cancellation_signal first;
  h.wait("http://a:80", 1, first.slot());
  h.wait("http://a:80", 2);
  h.runner.run_ready();
  CHECK(h.pool.stats().waiting == 2);

  first.emit(asio::cancellation_type::terminal);
  h.runner.run_ready();
  REQUIRE(h.woken == std::vector<int>{1});
  CHECK(h.errors[0] == asio::error::operation_aborted);
  CHECK(h.pool.stats().waiting == 1);

  held->mark_reusable();
  held.reset();
  h.runner.run_ready();
  REQUIRE(h.woken == std::vector<int>{1, 2});
  CHECK_FALSE(h.errors[1]);
  CHECK(h.pool.stats().waiting == 0);
}

TEST_CASE("pool: waiters cancelled anywhere in a long queue leave the others served in the order they came") {
  pool_harness h(1);
  std::optional<lease_type> held(h.take("http://a:80"));
  constexpr int waiters = 3000;
  std::vector<asio::cancellation_signal> signals(waiters);
  for (int i = 0; i < waiters; ++i) h.wait("http://a:80", i, signals[static_cast<std::size_t>(i)].slot());
  h.runner.run_ready();
  // Every third, newest first, then the first: a queue thousands long is
  // when cancellations come thickest.
  std::vector<int> cancelled;
  for (int i = waiters - 1; i > 0; --i)
    if (i % 3 == 1) cancelled.push_back(i);
  cancelled.push_back(0);
  for (int i : cancelled) signals[static_cast<std::size_t>(i)].emit(asio::cancellation_type::terminal);
  h.runner.run_ready();
  CHECK(h.woken == cancelled);
  for (const auto& ec : h.errors) CHECK(ec == asio::error::operation_aborted);
  const std::size_t left = static_cast<std::size_t>(waiters) - cancelled.size();
  CHECK(h.pool.stats().waiting == left);

  h.woken.clear();
  h.errors.clear();
  for (std::size_t n = 0; n < left; ++n) {
    held->mark_reusable();
    held.reset();
    h.runner.run_ready();
    held.emplace(h.take("http://a:80"));
  }
  std::vector<int> expected;
  for (int i = 1; i < waiters; ++i)
    if (i % 3 != 1) expected.push_back(i);
  CHECK(h.woken == expected);
  for (const auto& ec : h.errors) CHECK_FALSE(ec);
  CHECK(h.pool.stats().waiting == 0);
  // A cancellation after its waiter was served changes nothing.
  signals[2].emit(asio::cancellation_type::terminal);
  h.runner.run_ready();
  CHECK(h.woken.size() == expected.size());
}

TEST_CASE("pool: a connection idle for longer than the idle timeout is closed, not reused") {
  pool_harness h(2, 30s);
  {
    lease_type held = h.take("http://a:80");
    held.mark_reusable();
  }
  h.runner.run_for(30s); // exactly the timeout: still usable
  {
    std::optional<lease_type> held = h.pool.try_lease("http://a:80");
    REQUIRE(held);
    REQUIRE(held->get());
    CHECK(held->get()->id == 1);
    held->mark_reusable();
  }
  h.runner.run_for(30s + 1ns);
  std::optional<lease_type> late = h.pool.try_lease("http://a:80");
  REQUIRE(late);
  CHECK(late->get() == nullptr); // a permit: the idle one was too old
  CHECK(h.closed == std::vector<int>{1});
  CHECK(h.pool.stats().stale_discarded == 1);
}

TEST_CASE("pool: expired idle connections of origins no longer used are closed and forgotten") {
  pool_harness h(2, 30s);
  {
    lease_type held = h.take("http://once:80");
    held.mark_reusable();
  }
  CHECK(h.pool.origins() == 1);
  h.runner.run_for(31s);
  {
    lease_type other = h.take("http://b:80"); // its return sweeps
    other.mark_reusable();
  }
  CHECK(h.closed == std::vector<int>{1});
  CHECK(h.pool.origins() == 1); // only b is left
  CHECK(h.pool.stats().idle == 1);
}

TEST_CASE("pool: a connection whose exchange did not end cleanly is closed, never pooled") {
  pool_harness h;
  {
    lease_type held = h.take("http://a:80");
    (void)held; // not marked reusable
  }
  CHECK(h.closed == std::vector<int>{1});
  CHECK(h.pool.stats().idle == 0);
  CHECK(h.pool.stats().open == 0);

  // One found closed by the server (or holding stray bytes) is closed too.
  {
    lease_type held = h.take("http://a:80");
    held.get()->stale = true;
    held.mark_reusable();
  }
  std::optional<lease_type> next = h.pool.try_lease("http://a:80");
  REQUIRE(next);
  CHECK(next->get() == nullptr);
  CHECK(h.closed == std::vector<int>{1, 2});
  CHECK(h.pool.stats().stale_discarded == 1);
}

TEST_CASE("pool: close_idle closes every idle connection and leaves the leased ones") {
  pool_harness h(4);
  std::optional<lease_type> busy(h.take("http://a:80"));
  {
    lease_type one = h.take("http://a:80");
    lease_type two = h.take("http://b:80");
    one.mark_reusable();
    two.mark_reusable();
  }
  CHECK(h.pool.stats().idle == 2);
  h.pool.close_idle();
  CHECK(h.pool.stats().idle == 0);
  CHECK(h.pool.stats().leased == 1);
  CHECK(h.closed.size() == 2);
  CHECK(std::find(h.closed.begin(), h.closed.end(), 1) == h.closed.end()); // the leased one stays open
}

TEST_CASE("pool: a lease prefers a connection that suits, else opens one, closing an unsuited idle one at the limit") {
  pool_harness h(3);
  {
    // Three idle connections, given back in the order 1, 2, 3: 3 the newest.
    std::optional<lease_type> one(h.take("http://a:80")), two(h.take("http://a:80")), three(h.take("http://a:80"));
    for (auto* l : {&one, &two, &three}) {
      (*l)->mark_reusable();
      l->reset();
    }
  }
  const auto not_three = [](const fake_connection& c) { return c.id != 3; };
  std::optional<lease_type> got = h.pool.try_lease("http://a:80", not_three);
  REQUIRE(got);
  REQUIRE(got->get());
  CHECK(got->get()->id == 2); // the newest that suits, not the newest
  CHECK(h.pool.stats().idle == 2);
  got.reset(); // not reusable: closed
  CHECK(h.closed == std::vector<int>{2});

  // None suits, and there is room: a permit; the idle ones stay.
  const auto none = [](const fake_connection&) { return false; };
  std::optional<lease_type> permit = h.pool.try_lease("http://a:80", none);
  REQUIRE(permit);
  CHECK(permit->get() == nullptr);
  CHECK(h.pool.stats().idle == 2);
  permit.reset();

  // None suits, and the origin is at its limit: the oldest idle one is
  // closed to make room for a new connection.
  lease_type held = h.take("http://a:80"); // 3, the newest idle
  std::optional<lease_type> opening = h.pool.try_lease("http://a:80", none); // a permit: 1 idle, 2 leased
  REQUIRE(opening);
  CHECK(h.closed == std::vector<int>{2});
  std::optional<lease_type> room = h.pool.try_lease("http://a:80", none);
  REQUIRE(room);
  CHECK(room->get() == nullptr);
  CHECK(h.closed == std::vector<int>{2, 1});
  CHECK(h.pool.stats().leased == 3);
  CHECK(h.pool.stats().idle == 0);
}

TEST_CASE("pool: the exchange estimate is an average of how long leases were held, the first taken alone") {
  pool_harness h(2);
  CHECK(h.pool.exchange_estimate("http://a:80") == 0ms);
  h.exchange_of("http://a:80", 40ms);
  CHECK(h.pool.exchange_estimate("http://a:80") == 40ms);
  h.exchange_of("http://a:80", 120ms);
  CHECK(h.pool.exchange_estimate("http://a:80") == 50ms); // 40 + (120 - 40) / 8
  CHECK(h.pool.exchange_estimate("http://b:80") == 0ms);  // per origin
}

TEST_CASE("pool: a waiter whose time left cannot fit an exchange is refused at once and never woken") {
  pool_harness h(1);
  h.exchange_of("http://a:80", 40ms); // exchanges on a take 40 ms
  std::optional<lease_type> held(h.take("http://a:80"));

  // 30 ms left: refused when it asks, before any connection is given back.
  h.wait_with("http://a:80", 1, 30ms);
  h.runner.run_ready();
  REQUIRE(h.woken == std::vector<int>{1});
  CHECK(h.errors[0] == coretry::http::pool_error::too_late);
  CHECK(h.pool.stats().waiting == 0);

  // 100 ms left when it asks: it waits; 70 ms later it has 30 ms, and the
  // connection given back then does not go to it, nor does a cancellation
  // that comes after its refusal do anything.
  asio::cancellation_signal second;
  h.wait_with("http://a:80", 2, 100ms, second.slot());
  h.runner.run_ready();
  CHECK(h.woken.size() == 1);
  CHECK(h.pool.stats().waiting == 1);
  h.runner.run_for(70ms);
  held->mark_reusable();
  held.reset();
  h.runner.run_ready();
  REQUIRE(h.woken == std::vector<int>{1, 2});
  CHECK(h.errors[1] == coretry::http::pool_error::too_late);
  second.emit(asio::cancellation_type::terminal);
  h.runner.run_ready();
  CHECK(h.woken.size() == 2);
  CHECK(h.pool.stats().waiting == 0);
  CHECK(h.pool.stats().idle == 1); // the connection stays for whoever can use it
}

TEST_CASE("pool: a waiter that became too late is refused when another comes, each handler called once") {
  pool_harness h(1);
  h.exchange_of("http://a:80", 40ms);
  std::optional<lease_type> held(h.take("http://a:80"));
  asio::cancellation_signal first, second;
  h.wait_with("http://a:80", 1, 50ms, first.slot());
  h.wait_with("http://a:80", 2, 60ms, second.slot());
  h.runner.run_ready();
  second.emit(asio::cancellation_type::terminal); // cancelled before it became too late
  h.runner.run_ready();
  REQUIRE(h.woken == std::vector<int>{2});
  CHECK(h.errors[0] == asio::error::operation_aborted);
  h.runner.run_for(20ms); // 1 has 30 ms left now
  h.wait_with("http://a:80", 3, 200ms);
  h.runner.run_ready();
  REQUIRE(h.woken == std::vector<int>{2, 1});
  CHECK(h.errors[1] == coretry::http::pool_error::too_late);
  first.emit(asio::cancellation_type::terminal); // after its refusal: nothing
  h.runner.run_ready();
  CHECK(h.woken.size() == 2);
  CHECK(h.pool.stats().waiting == 1);

  held->mark_reusable();
  held.reset();
  h.runner.run_ready();
  CHECK(h.woken == std::vector<int>{2, 1, 3});
  CHECK_FALSE(h.errors[2]);
}

TEST_CASE("pool: with a standing queue a freed connection goes to the waiter with the most time left") {
  pool_harness h(1);
  h.exchange_of("http://a:80", 40ms);
  std::optional<lease_type> held(h.take("http://a:80"));
  h.wait_with("http://a:80", 1, 100ms); // the oldest, about to give up 40 ms from now
  h.wait_with("http://a:80", 2, 300ms);
  h.wait_with("http://a:80", 3, 250ms);
  h.runner.run_ready();

  // 40 ms on, the oldest has 60 ms: one exchange would fit, barely; it is
  // not served first, the one with the most time left is.
  h.runner.run_for(40ms);
  held->mark_reusable();
  held.reset();
  h.runner.run_ready();
  REQUIRE(h.woken == std::vector<int>{2});
  held.emplace(h.take("http://a:80"));

  // 40 ms later the oldest has 20 ms: refused; the next oldest has time for
  // two exchanges, and the order of arrival is back.
  h.runner.run_for(40ms);
  held->mark_reusable();
  held.reset();
  h.runner.run_ready();
  REQUIRE(h.woken == std::vector<int>{2, 1, 3});
  CHECK_FALSE(h.errors[0]);
  CHECK(h.errors[1] == coretry::http::pool_error::too_late);
  CHECK_FALSE(h.errors[2]);
  CHECK(h.pool.stats().waiting == 0);
}

TEST_CASE("pool: a short-lived queue is served in the order it came, whatever the deadlines") {
  pool_harness h(1);
  h.exchange_of("http://a:80", 40ms);
  std::optional<lease_type> held(h.take("http://a:80"));
  h.wait_with("http://a:80", 1, 500ms);
  h.wait_with("http://a:80", 2, 2s);
  h.wait_with("http://a:80", 3, 300ms);
  h.wait_with("http://a:80", 4, 1s);
  h.runner.run_ready();
  for (int served = 0; served < 4; ++served) {
    h.runner.run_for(40ms);
    held->mark_reusable();
    held.reset();
    h.runner.run_ready();
    held.emplace(h.take("http://a:80"));
  }
  CHECK(h.woken == std::vector<int>{1, 2, 3, 4});
  for (const auto& ec : h.errors) CHECK_FALSE(ec);
}
