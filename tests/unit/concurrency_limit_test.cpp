// The concurrency limit on one thread: permits, the wait queue and its
// two-step grant, and the adaptive rule on exact instants (every `now` is a
// time since the manual clock's epoch, passed in).

#include <coretry/concurrency_limit.hpp>

#include <doctest/doctest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using coretry::concurrency_limit;
using coretry::duration;
using coretry::limit_signal;

namespace {

/// A waiter that records what happened to it; it may refuse its permit, and
/// may run a probe while being granted (under the limit's lock).
struct limit_test_waiter final : coretry::permit_waiter {
  explicit limit_test_waiter(std::vector<int>* order = nullptr, int name = 0) : order(order), name(name) {}
  std::vector<int>* order;
  int name;
  bool refuse = false;
  int accepted = 0, announced = 0;
  std::function<void()> while_granting;
  bool accept_permit() noexcept override {
    if (refuse) return false;
    ++accepted;
    if (while_granting) while_granting();
    return true;
  }
  void permit_granted() noexcept override {
    ++announced;
    if (order) order->push_back(name);
  }
};

concurrency_limit::options fixed_limit(unsigned n) {
  concurrency_limit::options o;
  o.adaptive = false;
  o.initial_limit = n;
  return o;
}

/// Adaptive options for exact tests: windows of 100 ms and 10 samples.
concurrency_limit::options limit_test_adaptive(unsigned initial = 20) {
  concurrency_limit::options o;
  o.initial_limit = initial;
  o.min_limit = 2;
  o.max_limit = 1000;
  o.window = 100ms;
  o.min_window_samples = 10;
  return o;
}

/// One window's ends: `n` attempts, all ending at `at` after `latency`, at
/// most `peak` holding a permit at once. The first end at or after the
/// previous window's deadline closes that window (and counts in this one).
void limit_test_window(concurrency_limit& cl, duration at, duration latency, unsigned n, unsigned peak,
                       limit_signal signal = limit_signal::sample) {
  while (n > 0) {
    unsigned taken = 0;
    while (taken < peak && taken < n && cl.try_acquire()) ++taken;
    REQUIRE(taken > 0);
    for (unsigned i = 0; i < taken; ++i) cl.release(at, latency, signal);
    n -= taken;
  }
}

/// Closes the window due at `at` with an end that teaches nothing.
void limit_test_close(concurrency_limit& cl, duration at) {
  REQUIRE(cl.try_acquire());
  cl.release(at, duration::zero(), limit_signal::ignored);
}

} // namespace

TEST_CASE("concurrency limit: permits up to the limit, each given back, counted") {
  concurrency_limit cl(fixed_limit(3));
  CHECK(cl.limit() == 3);
  CHECK(cl.try_acquire());
  CHECK(cl.try_acquire());
  CHECK(cl.try_acquire());
  CHECK_FALSE(cl.try_acquire());
  CHECK(cl.in_flight() == 3);
  cl.release(10ms, 5ms, limit_signal::sample);
  CHECK(cl.in_flight() == 2);
  CHECK(cl.try_acquire());
  for (int i = 0; i < 3; ++i) cl.release(20ms, 5ms, limit_signal::drop);
  CHECK(cl.in_flight() == 0);
  CHECK(cl.limit() == 3); // fixed: drops change nothing
  CHECK(cl.totals().acquired == 4);
  CHECK(cl.totals().waited == 0);
  CHECK(cl.totals().refused == 0);
}

TEST_CASE("concurrency limit: options are checked, the bad one named") {
  auto refused = [](concurrency_limit::options o, const std::string& name) {
    try {
      concurrency_limit cl(o);
      FAIL("accepted a bad " << name);
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find(name) != std::string::npos);
    }
  };
  concurrency_limit::options o;
  o.initial_limit = 0;
  refused(o, "initial_limit");
  o = {};
  o.min_limit = 0;
  refused(o, "min_limit");
  o = {};
  o.min_limit = 30; // above initial_limit
  refused(o, "min_limit");
  o = {};
  o.max_limit = 10; // below initial_limit
  refused(o, "max_limit");
  o = {};
  o.tolerance = 0.5;
  refused(o, "tolerance");
  o = {};
  o.decrease = 1.0;
  refused(o, "decrease");
  o = {};
  o.window = duration::zero();
  refused(o, "window");
  o = {};
  o.min_window_samples = 0;
  refused(o, "min_window_samples");
  o = {};
  o.max_wait = -1ms;
  refused(o, "max_wait");
  o = {};
  o.max_waiters = 2'000'000;
  refused(o, "max_waiters");
  // Not adaptive: the adaptive options are not looked at.
  o = fixed_limit(5);
  o.min_limit = 0;
  CHECK_NOTHROW(concurrency_limit{o});
}

TEST_CASE("concurrency limit: waiters are served newest first, the queue bounded") {
  auto o = fixed_limit(1);
  o.max_waiters = 3;
  concurrency_limit cl(o);
  std::vector<int> order;
  limit_test_waiter w1(&order, 1), w2(&order, 2), w3(&order, 3), w4(&order, 4);
  CHECK(cl.wait(w1) == concurrency_limit::wait_result::acquired); // a free permit: taken at once
  CHECK(cl.wait(w2) == concurrency_limit::wait_result::queued);
  CHECK(cl.wait(w3) == concurrency_limit::wait_result::queued);
  limit_test_waiter w5(&order, 5);
  CHECK(cl.wait(w5) == concurrency_limit::wait_result::queued);
  CHECK(cl.waiting() == 3);
  CHECK(cl.wait(w4) == concurrency_limit::wait_result::refused); // the queue is full
  CHECK(cl.totals().refused == 1);
  CHECK(cl.totals().waited == 3);
  for (int i = 0; i < 3; ++i) {
    cl.release(1ms, 1ms, limit_signal::sample); // each grant's holder gives it back in turn
    CHECK(cl.in_flight() == 1);                 // handed over, never free in between
  }
  CHECK(order == std::vector<int>{5, 3, 2});
  CHECK(w5.accepted == 1);
  CHECK(w2.announced == 1);
  cl.release(2ms, 1ms, limit_signal::sample);
  CHECK(cl.in_flight() == 0);
  CHECK(cl.waiting() == 0);
  CHECK(cl.totals().acquired == 4);

  // max_wait zero: nobody waits.
  auto no_wait = fixed_limit(1);
  no_wait.max_wait = duration::zero();
  concurrency_limit quick(no_wait);
  CHECK(quick.try_acquire());
  limit_test_waiter w(&order, 9);
  CHECK(quick.wait(w) == concurrency_limit::wait_result::refused);
  CHECK(quick.totals().refused == 1);
  CHECK(quick.waiting() == 0);
}

TEST_CASE("concurrency limit: no permit is taken past waiters") {
  // The limit rises (a used window) while two wait: the release that
  // closes the window grants both. While the newer is being granted, a
  // permit is free and the older still waits: a try_acquire then must not
  // take it.
  auto o = limit_test_adaptive(2);
  o.min_window_samples = 1;
  concurrency_limit cl(o);
  std::vector<int> order;
  limit_test_waiter a(&order, 1), b(&order, 2), c(&order, 3);
  REQUIRE(cl.try_acquire());
  REQUIRE(cl.try_acquire());
  REQUIRE(cl.wait(a) == concurrency_limit::wait_result::queued);
  REQUIRE(cl.wait(b) == concurrency_limit::wait_result::queued);
  REQUIRE(cl.wait(c) == concurrency_limit::wait_result::queued);
  cl.release(0ms, 10ms, limit_signal::sample); // opens the first window; c gets the permit
  CHECK(order == std::vector<int>{3});
  CHECK(cl.limit() == 2);
  bool barged = true;
  b.while_granting = [&] { barged = cl.try_acquire(); }; // lock-free: may be called under the lock
  cl.release(100ms, 10ms, limit_signal::sample); // closes it: peak 2 of 2, limit 3
  CHECK(cl.limit() == 3);
  CHECK_FALSE(barged);
  CHECK(order == std::vector<int>{3, 2, 1});
  CHECK(cl.in_flight() == 3);
  CHECK(cl.waiting() == 0);
  CHECK(cl.cancel_wait(a) == concurrency_limit::cancel_result::granted);
}

TEST_CASE("concurrency limit: cancel_wait answers removed or granted, and a refusing waiter is skipped") {
  concurrency_limit cl(fixed_limit(1));
  limit_test_waiter a, b, c;
  REQUIRE(cl.try_acquire());
  REQUIRE(cl.wait(a) == concurrency_limit::wait_result::queued);
  REQUIRE(cl.wait(b) == concurrency_limit::wait_result::queued);
  // Removed while queued: counted as a refusal unless told otherwise.
  CHECK(cl.cancel_wait(b) == concurrency_limit::cancel_result::removed);
  CHECK(cl.totals().refused == 1);
  CHECK(cl.cancel_wait(b) == concurrency_limit::cancel_result::removed); // twice: nothing more
  CHECK(cl.totals().refused == 1);
  REQUIRE(cl.wait(c) == concurrency_limit::wait_result::queued);
  CHECK(cl.cancel_wait(c, false) == concurrency_limit::cancel_result::removed);
  CHECK(cl.totals().refused == 1);
  // Granted: the permit is a's, even if its wait ends after the grant.
  cl.release(1ms, 1ms, limit_signal::sample);
  CHECK(a.accepted == 1);
  CHECK(a.announced == 1);
  CHECK(cl.cancel_wait(a) == concurrency_limit::cancel_result::granted);
  CHECK(cl.in_flight() == 1);
  CHECK(cl.totals().refused == 1);

  // A waiter that refuses in accept_permit is skipped: the next gets the
  // permit; when every waiter refuses, it goes back to the pool.
  limit_test_waiter d, e, f;
  REQUIRE(cl.wait(d) == concurrency_limit::wait_result::queued);
  REQUIRE(cl.wait(e) == concurrency_limit::wait_result::queued);
  e.refuse = true;
  cl.release(2ms, 1ms, limit_signal::sample); // a's permit
  CHECK(e.announced == 0);
  CHECK(d.announced == 1);
  CHECK(cl.in_flight() == 1);
  CHECK(cl.waiting() == 0);
  CHECK(cl.cancel_wait(e) == concurrency_limit::cancel_result::removed);
  CHECK(cl.cancel_wait(d) == concurrency_limit::cancel_result::granted);
  REQUIRE(cl.wait(f) == concurrency_limit::wait_result::queued);
  f.refuse = true;
  cl.release(3ms, 1ms, limit_signal::sample); // d's permit: f refuses, back to the pool
  CHECK(cl.in_flight() == 0);
  CHECK(cl.waiting() == 0);
  CHECK(cl.cancel_wait(f) == concurrency_limit::cancel_result::removed);
  CHECK(cl.totals().acquired == 3); // the first, a, d
  CHECK(cl.totals().waited == 6);
  // A waiter used again after a refusal starts afresh.
  f.refuse = false;
  CHECK(cl.wait(f) == concurrency_limit::wait_result::acquired);
}

TEST_CASE("concurrency limit: a used limit grows, an unused one does not") {
  concurrency_limit cl(limit_test_adaptive(20));
  // Windows of 10 ms samples, at most 10 permits held: half the limit, used.
  limit_test_window(cl, 0ms, 10ms, 10, 10);
  CHECK(cl.limit() == 20); // the first window is still open
  limit_test_window(cl, 100ms, 10ms, 10, 10);
  // Grew by max(1, sqrt(20) / 2) = 2.236.
  CHECK(cl.limit() == 22);
  // Read back from its histogram bucket: within 1/16.
  CHECK(cl.baseline() >= 10ms - duration(10ms) / 16);
  CHECK(cl.baseline() <= 10ms + duration(10ms) / 16);
  // At most 5 held of 22: unused, the limit stays.
  for (int i = 2; i < 10; ++i) limit_test_window(cl, i * 100ms, 10ms, 10, 5);
  CHECK(cl.limit() == 22);
  // Too few samples: the window stays open past its deadline.
  limit_test_window(cl, 1000ms, 10ms, 9, 9);
  limit_test_close(cl, 1100ms);
  CHECK(cl.limit() == 22);
  limit_test_window(cl, 1150ms, 10ms, 1, 1); // the tenth
  limit_test_close(cl, 1200ms);              // closed: its peak 9 of 22, unused
  CHECK(cl.limit() == 22);
  limit_test_window(cl, 1300ms, 10ms, 12, 12);
  limit_test_close(cl, 1400ms);
  CHECK(cl.limit() == 24); // 12 of 22 held: used
}

TEST_CASE("concurrency limit: the limit falls on latency and on drops, within its bounds") {
  concurrency_limit cl(limit_test_adaptive(40));
  for (int i = 0; i < 5; ++i) limit_test_window(cl, i * 100ms, 10ms, 10, 10); // unused: stays 40
  CHECK(cl.limit() == 40);
  // The median at 25 ms, more than 2 x the 10 ms baseline: x max(0.5, 10/25).
  limit_test_window(cl, 500ms, 25ms, 10, 10);
  limit_test_close(cl, 600ms);
  CHECK(cl.limit() == 20);
  // Within tolerance (18 ms < 2 x 10 ms) and used: grows again.
  limit_test_window(cl, 700ms, 18ms, 10, 10);
  limit_test_close(cl, 800ms);
  CHECK(cl.limit() == 22); // 20 + sqrt(20) / 2
  // Drops in 1% of the ends or more: x 0.9.
  limit_test_window(cl, 900ms, 10ms, 9, 9);
  limit_test_window(cl, 900ms, 250ms, 1, 1, limit_signal::drop);
  limit_test_close(cl, 1000ms);
  CHECK(cl.limit() == 20); // 22.236 x 0.9
  // Drops in under 1% of the ends (1 in 120) are not overload.
  limit_test_window(cl, 1100ms, 10ms, 119, 5);
  limit_test_window(cl, 1100ms, 250ms, 1, 1, limit_signal::drop);
  limit_test_close(cl, 1200ms);
  CHECK(cl.limit() == 20);

  // Bounds: drops take it down to min_limit, no further.
  for (int i = 13; i < 60; ++i) limit_test_window(cl, i * 100ms, 250ms, 10, 2, limit_signal::drop);
  CHECK(cl.limit() == 2);
  // ... and a used limit grows up to max_limit, no further.
  auto o = limit_test_adaptive(998);
  o.max_limit = 1000;
  concurrency_limit top(o);
  for (int i = 0; i < 5; ++i) limit_test_window(top, i * 100ms, 10ms, 600, 600);
  CHECK(top.limit() == 1000);
}

TEST_CASE("concurrency limit: a lower limit revokes nothing, it refuses until enough are given back") {
  concurrency_limit cl(limit_test_adaptive(20));
  for (int i = 0; i < 15; ++i) REQUIRE(cl.try_acquire()); // long attempts
  limit_test_window(cl, 0ms, 10ms, 10, 5);                  // peak 20 of 20
  limit_test_window(cl, 100ms, 30ms, 10, 5);                // closes the first: 22
  CHECK(cl.limit() == 22);
  limit_test_close(cl, 200ms); // 30 ms against 10 ms: x 0.5
  CHECK(cl.limit() == 11);
  CHECK(cl.in_flight() == 15);
  CHECK_FALSE(cl.try_acquire());
  for (int i = 0; i < 4; ++i) cl.release(210ms, 210ms, limit_signal::ignored);
  CHECK(cl.in_flight() == 11);
  CHECK_FALSE(cl.try_acquire());
  cl.release(210ms, 210ms, limit_signal::ignored);
  CHECK(cl.try_acquire());
  CHECK(cl.in_flight() == 11);
}

TEST_CASE("concurrency limit: one lucky sample does not set the baseline") {
  concurrency_limit cl(limit_test_adaptive(20));
  limit_test_window(cl, 0ms, 20ms, 10, 2);
  limit_test_window(cl, 100ms, 20ms, 10, 2);
  const duration baseline = cl.baseline();
  CHECK(baseline >= 20ms - duration(20ms) / 16);
  CHECK(baseline <= 20ms + duration(20ms) / 16);
  // A window with one answer in 1 ms (a cached error, say), then one with two.
  limit_test_window(cl, 200ms, 1ms, 1, 1);
  limit_test_window(cl, 200ms, 20ms, 9, 2);
  limit_test_window(cl, 300ms, 1ms, 2, 2);
  limit_test_window(cl, 300ms, 20ms, 8, 2);
  limit_test_window(cl, 400ms, 20ms, 10, 2);
  CHECK(cl.baseline() == baseline);
  // Nothing looked like a queue: used, it grows.
  limit_test_window(cl, 500ms, 20ms, 10, 10);
  limit_test_close(cl, 600ms);
  CHECK(cl.limit() == 22);
}

TEST_CASE("concurrency limit: a dependency slower for good becomes the baseline") {
  SUBCASE("slower within tolerance: learnt once the faster windows are 32 windows old") {
    concurrency_limit cl(limit_test_adaptive(20));
    int w = 0;
    for (; w < 10; ++w) limit_test_window(cl, w * 100ms, 10ms, 10, 2);
    const duration fast = cl.baseline();
    CHECK(fast <= 10ms);
    for (int i = 0; i < 28; ++i, ++w) limit_test_window(cl, w * 100ms, 15ms, 10, 2);
    CHECK(cl.baseline() == fast); // not forgotten at once
    for (int i = 0; i < 5; ++i, ++w) limit_test_window(cl, w * 100ms, 15ms, 10, 2);
    CHECK(cl.baseline() >= 14ms);
    CHECK(cl.baseline() <= 16ms);
    CHECK(cl.limit() == 20); // it was never cut
  }
  SUBCASE("far slower: the limit falls to its floor, and there learns the new latency") {
    concurrency_limit cl(limit_test_adaptive(20));
    int w = 0;
    for (; w < 10; ++w) limit_test_window(cl, w * 100ms, 10ms, 10, 2);
    for (int i = 0; i < 4; ++i, ++w) limit_test_window(cl, w * 100ms, 50ms, 10, 2);
    CHECK(cl.limit() == 2); // 20, 10, 5, 2.5, 2: the floor
    CHECK(cl.baseline() <= 10ms);
    // Four windows at the floor still queueing: not this limit's queue.
    for (int i = 0; i < 5; ++i, ++w) limit_test_window(cl, w * 100ms, 50ms, 10, 2);
    CHECK(cl.baseline() >= 48ms);
    CHECK(cl.baseline() <= 52ms);
    // Used again, it grows from there.
    for (int i = 0; i < 3; ++i, ++w) limit_test_window(cl, w * 100ms, 50ms, 10, 2);
    CHECK(cl.limit() >= 4);
  }
}
