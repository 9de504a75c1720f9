// The balancer's rule without sockets or clocks: the peak EWMA on explicit
// instants, requests in flight, power of two choices, slow start, the
// exclusions, and the shares it gives in simulated steady states (virtual
// time, a seeded generator).

#include "balancer.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <queue>
#include <stdexcept>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using time_point = std::chrono::steady_clock::time_point;
using balancer_type = coretry::http::detail::basic_balancer<time_point>;
using coretry::http::detail::address_set;
using coretry::http::detail::balance_mode;
using coretry::http::detail::balancer_options;

const time_point start = time_point{} + 1000h;

double ns(std::chrono::nanoseconds d) { return static_cast<double>(d.count()); }

/// splitmix64: reproducible draws, uniform(m) in [0, m].
struct seeded_draws {
  std::uint64_t state;
  unsigned calls = 0;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t uniform(std::uint64_t m) {
    ++calls;
    if (m == UINT64_MAX) return next();
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(next()) * (m + 1)) >> 64);
  }
};

/// Requests arriving every `gap` on virtual time, each sent where the
/// balancer picks, answered after its address's latency (± 20%), and with
/// spike_one_in set, one answer in that many (drawn) spike_factor times
/// later (a descheduled process).
struct simulation {
  simulation(balancer_type& b, std::vector<std::chrono::nanoseconds> l) : balancer(b), latency(std::move(l)) {}
  balancer_type& balancer;
  std::vector<std::chrono::nanoseconds> latency;
  seeded_draws draws{42};
  std::uint64_t spike_one_in = 0;
  double spike_factor = 10;
  time_point now = start;
  struct in_flight {
    time_point end;
    time_point began;
    std::size_t slot;
    bool operator>(const in_flight& o) const { return end > o.end; }
  };
  std::priority_queue<in_flight, std::vector<in_flight>, std::greater<>> pending;

  /// Runs for `length`; returns the picks of each slot.
  std::vector<unsigned> run(std::chrono::nanoseconds length, std::chrono::nanoseconds gap, address_set candidates) {
    std::vector<unsigned> picks(latency.size());
    for (const time_point end = now + length; now < end; now += gap) {
      while (!pending.empty() && pending.top().end <= now) {
        const in_flight done = pending.top();
        pending.pop();
        balancer.finished(done.slot, done.end - done.began, done.end);
      }
      const auto chosen = balancer.pick(candidates, 0, now, draws);
      REQUIRE(chosen.has_value());
      ++picks[*chosen];
      balancer.started(*chosen);
      double jitter = 0.8 + 0.4 * static_cast<double>(draws.uniform(1000)) / 1000.0;
      if (spike_one_in != 0 && draws.uniform(spike_one_in - 1) == 0) jitter *= spike_factor;
      const auto took = std::chrono::nanoseconds(static_cast<std::int64_t>(ns(latency[*chosen]) * jitter));
      pending.push({now + took, now, *chosen});
    }
    return picks;
  }
};

double share(const std::vector<unsigned>& picks, std::size_t slot) {
  unsigned total = 0;
  for (unsigned p : picks) total += p;
  return static_cast<double>(picks[slot]) / static_cast<double>(total);
}

} // namespace

TEST_CASE("balancer: the peak EWMA on explicit instants") {
  balancer_type b;
  b.assign(1, start);
  CHECK(b.estimate(0, start) == ns(30ms)); // the default before any answer
  b.observe(0, 10ms, start);
  CHECK(b.estimate(0, start) == ns(10ms));
  // Between samples it decays toward zero: exp(-5 s / 10 s).
  const double w = std::exp(-0.5);
  CHECK(b.estimate(0, start + 5s) == doctest::Approx(ns(10ms) * w).epsilon(1e-12));
  // A sample below the decayed estimate moves it toward the sample with
  // weight w on it.
  b.observe(0, 4ms, start + 5s);
  const double expected = ns(10ms) * w * w + ns(4ms) * (1 - w);
  CHECK(b.estimate(0, start + 5s) == doctest::Approx(expected).epsilon(1e-12));
  // One second later, decayed by exp(-0.1) from there.
  CHECK(b.estimate(0, start + 6s) == doctest::Approx(expected * std::exp(-0.1)).epsilon(1e-12));
}

TEST_CASE("balancer: a sample above the estimate replaces it") {
  balancer_type b;
  b.assign(1, start);
  b.observe(0, 5ms, start);
  b.observe(0, 80ms, start + 1ms);
  CHECK(b.estimate(0, start + 1ms) == ns(80ms));
  // A small sample soon after barely moves it: the peak holds.
  b.observe(0, 5ms, start + 2ms);
  const double w = std::exp(-1e-4);
  CHECK(b.estimate(0, start + 2ms) == doctest::Approx(ns(80ms) * w * w + ns(5ms) * (1 - w)).epsilon(1e-12));
  CHECK(b.estimate(0, start + 2ms) > ns(79ms));
  // A sample equal to the decayed estimate is not a peak, and keeps it.
  const double now_estimate = b.estimate(0, start + 2ms);
  b.observe(0, std::chrono::nanoseconds(static_cast<std::int64_t>(now_estimate)), start + 2ms);
  CHECK(b.estimate(0, start + 2ms) == doctest::Approx(now_estimate).epsilon(1e-9));
}

TEST_CASE("balancer: a stream of samples holds the estimate among their values") {
  for (const auto gap : {std::chrono::nanoseconds(1ms), std::chrono::nanoseconds(100ms), std::chrono::nanoseconds(5s)}) {
    CAPTURE(gap.count());
    balancer_type b;
    b.assign(1, start);
    b.observe(0, 50ms, start); // a slow first answer
    time_point t = start;
    // Ten time constants (100 s) of samples, at least 2,000 of them.
    const auto n = std::max<std::int64_t>(2000, std::chrono::nanoseconds(100s) / gap);
    for (std::int64_t i = 0; i < n; ++i) b.observe(0, 10ms, t += gap);
    // Read at the latest sample's instant: the samples' value, not below it.
    CHECK(b.estimate(0, t) == doctest::Approx(ns(10ms)).epsilon(0.01));
    // Samples of 12 and 8 ms in turn: read at a sample's instant, the
    // estimate is never outside them.
    for (int i = 0; i < 200; ++i) {
      b.observe(0, i % 2 == 0 ? 12ms : 8ms, t += gap);
      CHECK(b.estimate(0, t) >= ns(8ms));
      CHECK(b.estimate(0, t) <= ns(12ms));
    }
  }
}

TEST_CASE("balancer: a faster answer never raises the estimate, a slower one never lowers it") {
  for (const auto gap : {std::chrono::nanoseconds(1ms), std::chrono::nanoseconds(1s), std::chrono::nanoseconds(5s),
                         std::chrono::nanoseconds(30s)}) {
    for (const double share : {0.0, 0.5, 0.99, 1.0}) {
      CAPTURE(gap.count());
      CAPTURE(share);
      balancer_type b;
      b.assign(1, start);
      b.observe(0, 10ms, start);
      const double before = b.estimate(0, start + gap);
      // A sample at `share` of the estimate as it reads now.
      const auto x = std::chrono::nanoseconds(static_cast<std::int64_t>(before * share));
      b.observe(0, x, start + gap);
      CHECK(b.estimate(0, start + gap) <= before);
      CHECK(b.estimate(0, start + gap) >= ns(x));
      // One above it replaces it.
      const auto above = std::chrono::nanoseconds(static_cast<std::int64_t>(before) + 1000);
      b.observe(0, above, start + gap);
      CHECK(b.estimate(0, start + gap) == ns(above));
    }
  }
}

TEST_CASE("balancer: cost counts the requests in flight") {
  balancer_type b;
  b.assign(2, start);
  // No answer yet: free while idle (so it is tried), the default RTT once busy.
  CHECK(b.cost(0, start) == 0);
  b.started(0);
  CHECK(b.outstanding(0) == 1);
  CHECK(b.cost(0, start) == doctest::Approx(std::sqrt(2.0) * ns(30ms)).epsilon(1e-12));
  b.started(0);
  b.finished(0, 10ms, start);
  CHECK(b.outstanding(0) == 1);
  CHECK(b.cost(0, start) == doctest::Approx(std::sqrt(2.0) * ns(10ms)).epsilon(1e-12));
  b.started(0);
  b.started(0);
  CHECK(b.cost(0, start) == doctest::Approx(2 * ns(10ms)).epsilon(1e-12)); // (3 + 1)^0.5
  // An end with nothing learnt leaves the estimate alone.
  b.ended(0);
  CHECK(b.outstanding(0) == 2);
  CHECK(b.estimate(0, start) == ns(10ms));
  b.ended(0);
  b.ended(0);
  b.ended(0); // one more end than starts: stays at zero
  CHECK(b.outstanding(0) == 0);
  CHECK(b.cost(0, start) == ns(10ms));
  CHECK(b.outstanding(1) == 0);
  // Slots out of range are ignored.
  b.started(7);
  CHECK(b.outstanding(7) == 0);
}

TEST_CASE("balancer: power of two choices never takes the worse of its two") {
  balancer_type b;
  b.assign(3, start - 10s); // past their slow start
  b.observe(0, 5ms, start);
  b.observe(1, 20ms, start);
  b.observe(2, 40ms, start);
  seeded_draws draws{7};
  unsigned best = 0;
  for (int i = 0; i < 3000; ++i) {
    const auto pair = b.pick(0b011, 0, start, draws); // both drawn: the cheaper wins
    REQUIRE(pair.has_value());
    CHECK(*pair == 0);
    const auto chosen = b.pick(0b111, 0, start, draws);
    REQUIRE(chosen.has_value());
    CHECK(*chosen != 2); // the dearest loses to either other
    best += *chosen == 0;
  }
  // The cheapest wins whenever drawn: two pairs in three.
  CHECK(best == doctest::Approx(2000).epsilon(0.05));
  // Every pair as likely, whatever the slots' order: the cheapest last.
  b.assign(3, start - 10s);
  b.observe(0, 40ms, start);
  b.observe(1, 20ms, start);
  b.observe(2, 5ms, start);
  unsigned last = 0;
  for (int i = 0; i < 3000; ++i) last += b.pick(0b111, 0, start, draws) == std::optional<std::size_t>(2);
  CHECK(last == doctest::Approx(2000).epsilon(0.05));
  // Addresses that start slow together (a new list) keep the plain rule.
  b.assign(2, start);
  b.observe(0, 5ms, start);
  b.observe(1, 20ms, start);
  REQUIRE(b.weight(0, start + 100ms) < 1);
  for (int i = 0; i < 100; ++i) CHECK(b.pick(0b11, 0, start + 100ms, draws) == std::optional<std::size_t>(0));
  // Samples of different ages: costs as decayed now. 10 ms five seconds
  // old is 6.07 ms now, below a fresh 6.2 ms.
  b.assign(2, start - 10s);
  b.observe(0, 10ms, start);
  b.observe(1, 6200us, start + 5s);
  REQUIRE(b.cost(0, start + 5s) < b.cost(1, start + 5s));
  for (int i = 0; i < 100; ++i) CHECK(b.pick(0b11, 0, start + 5s, draws) == std::optional<std::size_t>(0));
  REQUIRE(b.cost(0, start + 4s) > b.cost(1, start + 4s)); // a second earlier: 6.70 ms
  for (int i = 0; i < 100; ++i) CHECK(b.pick(0b11, 0, start + 4s, draws) == std::optional<std::size_t>(1));
}

TEST_CASE("balancer: requests in flight weigh by their square root") {
  balancer_type b;
  b.assign(2, start - 10s);
  b.observe(0, 10ms, start);
  b.observe(1, 12ms, start);
  seeded_draws draws{9};
  // As many in flight: the lower latency.
  for (int i = 0; i < 100; ++i) CHECK(b.pick(0b11, 0, start, draws) == std::optional<std::size_t>(0));
  // One more in flight: 10 ms x 2^0.5 = 14.1 against 12 x 1: the idle one
  // serves.
  b.started(0);
  for (int i = 0; i < 100; ++i) CHECK(b.pick(0b11, 0, start, draws) == std::optional<std::size_t>(1));
  // 3 in flight at 10 ms (cost 20) against 1 at 12 ms (cost 17.0): the
  // latter; with the plain product (40 against 24) the same, and 2 at 5 ms
  // (8.7) against none at 12 ms: the busy one, where the product (15 > 12)
  // would pick the idle one.
  b.started(0);
  b.started(0);
  b.started(1);
  for (int i = 0; i < 100; ++i) CHECK(b.pick(0b11, 0, start, draws) == std::optional<std::size_t>(1));
  // 2 in flight at 5 ms against none at 12 ms, for a bias: the cost of the
  // busy one, and the pick.
  const auto busy_against_idle = [&](double bias, double expected_cost, std::size_t expected_pick) {
    CAPTURE(bias);
    balancer_options o;
    o.in_flight_bias = bias;
    balancer_type two(o);
    two.assign(2, start - 10s);
    two.observe(0, 5ms, start);
    two.observe(1, 12ms, start);
    two.started(0);
    two.started(0);
    CHECK(two.cost(0, start) == doctest::Approx(expected_cost).epsilon(1e-12));
    for (int i = 0; i < 100; ++i) CHECK(two.pick(0b11, 0, start, draws) == std::optional<std::size_t>(expected_pick));
  };
  busy_against_idle(0.5, std::sqrt(3.0) * ns(5ms), 0); // the default: 8.7 against 12
  busy_against_idle(1, 3 * ns(5ms), 1);                // the plain product: 15 against 12
  busy_against_idle(2, 9 * ns(5ms), 1);                // (in flight + 1)^2: 45 against 12
}

TEST_CASE("balancer: a slow address gets almost nothing in a steady state") {
  balancer_type b;
  b.assign(2, start);
  simulation sim{b, {5ms, 80ms}};
  sim.run(10s, 1ms, 0b11); // warm up: first samples, slow start over
  const auto picks = sim.run(60s, 1ms, 0b11);
  MESSAGE("slow address: ", picks[1], " of ", picks[0] + picks[1]);
  CHECK(share(picks, 1) <= 0.005);
  CHECK(picks[1] > 0); // still tried now and then, as its peak decays
}

/// Two addresses past their slow start, resample_after 10: 0 answered in
/// 5 ms and 1 in 50 ms, both at `start`.
balancer_type resampling_pair() {
  balancer_options o;
  o.resample_after = 10;
  balancer_type b(o);
  b.assign(2, start - 10s);
  b.started(0);
  b.finished(0, 5ms, start);
  b.started(1);
  b.finished(1, 50ms, start);
  return b;
}

/// `n` requests to `slot`, each answered in 5 ms at `start`.
void answered(balancer_type& b, std::size_t slot, int n) {
  for (int i = 0; i < n; ++i) {
    b.started(slot);
    b.finished(slot, 5ms, start);
  }
}

TEST_CASE("balancer: an address no request went to in resample_after is tried, its answer a first sample") {
  balancer_type b = resampling_pair();
  seeded_draws draws{3};
  // Nine requests to 0 since 1's last: 1 is still behind.
  for (int i = 0; i < 9; ++i) {
    CHECK(b.pick(0b11, 0, start, draws) == std::optional<std::size_t>(0));
    b.started(0);
    b.finished(0, 5ms, start);
  }
  CHECK(b.cost(1, start) > b.cost(0, start));
  CHECK(b.pick(0b11, 0, start, draws) == std::optional<std::size_t>(0));
  b.started(0);
  // The tenth: 1 costs nothing while idle, and is tried.
  CHECK(b.cost(1, start) == 0);
  CHECK(b.estimate(1, start) == ns(50ms)); // still its estimate
  CHECK(b.pick(0b11, 0, start, draws) == std::optional<std::size_t>(1));
  b.started(1);
  // In flight it keeps its estimate: not a cheap address meanwhile.
  CHECK(b.estimate(1, start) == ns(50ms));
  CHECK(b.cost(1, start) == doctest::Approx(ns(50ms) * std::sqrt(2.0)));
  for (int i = 0; i < 100; ++i) CHECK(b.pick(0b11, 0, start, draws) == std::optional<std::size_t>(0));
  // Its answer is taken as it is, not blended with the 50 ms.
  b.finished(1, 2ms, start + 2ms);
  CHECK(b.estimate(1, start + 2ms) == ns(2ms));
  b.finished(0, 5ms, start + 2ms);
  CHECK(b.pick(0b11, 0, start + 2ms, draws) == std::optional<std::size_t>(1));
}

TEST_CASE("balancer: a probe that ends unanswered leaves the estimate, and the next waits resample_after more") {
  balancer_type b = resampling_pair();
  answered(b, 0, 10);
  CHECK(b.cost(1, start) == 0); // stale: to be tried
  b.started(1);                  // the probe
  b.ended(1);                    // cancelled, say: nothing learnt
  CHECK(b.estimate(1, start) == ns(50ms));
  CHECK(b.cost(1, start) == ns(50ms));
  seeded_draws draws{9};
  for (int i = 0; i < 9; ++i) {
    CHECK(b.pick(0b11, 0, start, draws) == std::optional<std::size_t>(0));
    b.started(0);
    b.finished(0, 5ms, start);
  }
  b.started(0);
  b.finished(0, 5ms, start);
  CHECK(b.cost(1, start) == 0); // ten more: stale again
}

TEST_CASE("balancer: an address stale with a request in flight is not probed") {
  balancer_type b = resampling_pair();
  b.started(1); // a long request, still in flight
  answered(b, 0, 20);
  CHECK(b.cost(1, start) == doctest::Approx(ns(50ms) * std::sqrt(2.0))); // not free
  // Sent to anyway (the others avoided, say): an answer to it is blended as
  // any, and the peak rule keeps the 50 ms against a 2 ms answer.
  b.started(1);
  b.finished(1, 2ms, start);
  CHECK(b.estimate(1, start) == doctest::Approx(ns(50ms)));
}

TEST_CASE("balancer: no resampling while held, nor with resample_after 0") {
  for (const std::uint32_t after : {10u, 0u}) {
    CAPTURE(after);
    balancer_options o;
    o.resample_after = after;
    balancer_type b(o);
    b.assign(2, start - 10s);
    b.started(0);
    b.finished(0, 5ms, start);
    b.started(1);
    if (after != 0) {
      b.failed(1, 0ms, start); // held for 1 s
      b.ended(1);
    } else {
      b.finished(1, 50ms, start);
    }
    seeded_draws draws{5};
    for (int i = 0; i < 1000; ++i) {
      REQUIRE(b.pick(0b11, 0, start + 500ms, draws) == std::optional<std::size_t>(0));
      b.started(0);
      b.finished(0, 5ms, start + 500ms);
    }
    CHECK(b.cost(1, start + 500ms) > 0);
  }
}

TEST_CASE("balancer: a probe of a slow address is one request, where answers are slow everywhere") {
  // Three addresses at 200 ms, one at 2 s, 1,000 requests a second: the
  // others' cost (200 ms x the square root of ~67 in flight) is far above
  // default_rtt, so a probe priced as an address with no answer would
  // draw half the picks while it is out.
  balancer_type b;
  b.assign(4, start);
  simulation sim{b, {200ms, 200ms, 200ms, 2s}};
  sim.run(10s, 1ms, 0b1111);
  const auto picks = sim.run(30s, 1ms, 0b1111);
  MESSAGE("the 2 s address: ", picks[3], " of ", picks[0] + picks[1] + picks[2] + picks[3]);
  CHECK(share(picks, 3) <= 0.005);
}

TEST_CASE("balancer: a rare slow answer keeps its address out for few requests") {
  // Two equal addresses answering in 100 us, 25,000 requests a second, one
  // answer in 100,000 ten times slower: each such peak puts its address
  // behind the other until resample_after requests have gone there, not
  // for the 12 s its decay would take (every second's share 0 or 1 then).
  balancer_type b;
  b.assign(2, start);
  simulation sim{b, {100us, 100us}};
  sim.spike_one_in = 100000;
  sim.run(5s, 40us, 0b11);
  double least = 1, most = 0;
  for (int second = 0; second < 20; ++second) {
    CAPTURE(second);
    const double first = share(sim.run(1s, 40us, 0b11), 0);
    least = std::min(least, first);
    most = std::max(most, first);
    CHECK(first == doctest::Approx(0.5).epsilon(0.1)); // 50% ± 5% each second
  }
  MESSAGE("the first address's share per second: ", least, " to ", most);
}

TEST_CASE("balancer: equal addresses share equally") {
  balancer_type b;
  b.assign(4, start);
  simulation sim{b, {10ms, 10ms, 10ms, 10ms}};
  sim.run(5s, 1ms, 0b1111);
  const auto picks = sim.run(40s, 1ms, 0b1111);
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(share(picks, i) == doctest::Approx(0.25).epsilon(0.2)); // 25% ± 5%
  }
}

/// Shares of the last of `n` equal addresses back from an ejection: over its
/// first 500 ms, from 1 s to 2 s, and from 5 s to 10 s.
std::array<double, 3> shares_after_return(std::size_t n) {
  balancer_type b;
  b.assign(n, start);
  simulation sim{b, std::vector<std::chrono::nanoseconds>(n, 10ms)};
  const address_set all = (address_set{1} << n) - 1;
  const std::size_t last = n - 1;
  sim.run(10s, 1ms, all & ~(address_set{1} << last)); // ejected all along
  b.returned(last, sim.now);
  const auto first = sim.run(500ms, 1ms, all);
  sim.run(500ms, 1ms, all);
  const auto at_two = sim.run(1s, 1ms, all);
  sim.run(3s, 1ms, all);
  const auto after = sim.run(5s, 1ms, all);
  return {share(first, last), share(at_two, last), share(after, last)};
}

TEST_CASE("balancer: a returning address ramps up") {
  balancer_type b;
  b.assign(2, start);
  b.returned(1, start);
  CHECK(b.weight(1, start) == doctest::Approx(0.1).epsilon(0.01));
  CHECK(b.weight(1, start + 1s) == doctest::Approx(0.5).epsilon(0.01));
  CHECK(b.weight(1, start + 1999ms) < 1);
  CHECK(b.weight(1, start + 2s) == 1);
  for (std::size_t n : {2, 4}) {
    CAPTURE(n);
    const double fair = 1.0 / static_cast<double>(n);
    const auto s = shares_after_return(n);
    MESSAGE(n, " addresses, the returning one's share: ", s[0], " in its first 500 ms, ", s[1],
            " from 1 s to 2 s, ", s[2], " from 5 s");
    CHECK(s[0] <= fair / 2); // well below its fair share
    CHECK(s[1] >= fair / 2); // at least half of it
    CHECK(s[2] == doctest::Approx(fair).epsilon(0.2));
  }
}

TEST_CASE("balancer: a failure holds the address back, then it is tried again and starts slow") {
  balancer_type b;
  b.assign(2, start - 10s);
  b.observe(0, 5ms, start);
  b.observe(1, 5ms, start);
  // A refused connect at `start`: the penalty (1 s) stands for 1 s.
  b.failed(1, 0ms, start);
  CHECK(b.held(1, start));
  CHECK(b.estimate(1, start + 999ms) == doctest::Approx(ns(1s) * std::exp(-0.0999)).epsilon(1e-12));
  seeded_draws draws{11};
  for (int i = 0; i < 200; ++i) CHECK(b.pick(0b11, 0, start + 500ms, draws) == std::optional<std::size_t>(0));
  // Its hold over: no sample counts, it is free while idle (tried), and it
  // starts slow from there.
  const time_point back = start + 1s;
  CHECK_FALSE(b.held(1, back));
  CHECK(b.estimate(1, back) == ns(30ms));
  CHECK(b.cost(1, back) == 0);
  CHECK(b.weight(1, back) == doctest::Approx(0.1).epsilon(0.01));
  CHECK(b.weight(1, back + 1s) == doctest::Approx(0.5).epsilon(0.01));
  unsigned tried = 0;
  for (int i = 0; i < 200; ++i) tried += b.pick(0b11, 0, back, draws) == std::optional<std::size_t>(1);
  CHECK(tried > 0);
  // Its next answer is its estimate as it is.
  b.started(1);
  b.finished(1, 6ms, back + 10ms);
  CHECK(b.estimate(1, back + 10ms) == ns(6ms));
  CHECK_FALSE(b.held(1, back + 10ms));
}

TEST_CASE("balancer: failures in a row hold longer to a cap and an answer starts the count again") {
  balancer_type b;
  b.assign(1, start);
  time_point t = start;
  // Each failure comes when the last hold ends: 1, 2, 4, 8, then 10 s.
  for (const auto expected : {1s, 2s, 4s, 8s, 10s, 10s}) {
    CAPTURE(expected.count());
    b.failed(0, 0ms, t);
    CHECK(b.held(0, t + expected - 1ns));
    CHECK_FALSE(b.held(0, t + expected));
    t += expected;
  }
  // An answer ends the count: the next failure holds for 1 s again.
  b.started(0);
  b.finished(0, 5ms, t);
  b.failed(0, 0ms, t + 1ms);
  CHECK(b.held(0, t + 1ms + 999ms));
  CHECK_FALSE(b.held(0, t + 1ms + 1s));
  // A failure of a request sent before, while held, is the same failure:
  // the hold (1 s) does not double, it ends 1 s after the latest.
  b.failed(0, 0ms, t + 501ms);
  CHECK(b.held(0, t + 1501ms - 1ns));
  CHECK_FALSE(b.held(0, t + 1501ms));
  // So the next failure, after it, is the second in a row: 2 s.
  b.failed(0, 0ms, t + 2s);
  CHECK(b.held(0, t + 4s - 1ns));
  CHECK_FALSE(b.held(0, t + 4s));
  t += 4s;
  // A time-out counts its own time when it is above the penalty.
  b.failed(0, 3s, t + 2s);
  CHECK(b.estimate(0, t + 2s) == ns(3s));
  // With no hold, the penalty just decays.
  balancer_options o;
  o.failure_hold = 0ns;
  balancer_type plain(o);
  plain.assign(1, start);
  plain.failed(0, 0ms, start);
  CHECK_FALSE(plain.held(0, start));
  CHECK(plain.estimate(0, start + 10s) == doctest::Approx(ns(1s) / std::exp(1.0)).epsilon(1e-12));
}

TEST_CASE("balancer: an address down for a moment is used again within seconds") {
  // Four equal addresses; the last refuses connections from 4 s to 8 s (each
  // request sent to it then fails at once). After 8 s it is tried when its
  // hold ends and gets its share back.
  balancer_type b;
  b.assign(4, start);
  seeded_draws draws{5};
  std::array<unsigned, 4> picks{};
  time_point now = start;
  std::vector<std::pair<time_point, std::size_t>> pending;
  std::optional<time_point> first_back;
  unsigned after_back = 0, total_after = 0;
  for (; now < start + 20s; now += 1ms) {
    std::erase_if(pending, [&](const auto& p) {
      if (p.first > now) return false;
      b.finished(p.second, 10ms, p.first);
      return true;
    });
    const auto chosen = b.pick(0b1111, 0, now, draws);
    REQUIRE(chosen.has_value());
    const bool down = now >= start + 4s && now < start + 8s;
    if (*chosen == 3 && down) {
      b.failed(3, 0ms, now);
      continue;
    }
    ++picks[*chosen];
    b.started(*chosen);
    pending.emplace_back(now + 10ms, *chosen);
    if (now >= start + 8s && *chosen == 3 && !first_back) first_back = now;
    if (first_back && now >= *first_back + 3s && now < *first_back + 8s) {
      ++total_after;
      after_back += *chosen == 3;
    }
  }
  REQUIRE(first_back.has_value());
  MESSAGE("back after ", std::chrono::duration<double>(*first_back - (start + 8s)).count(), " s");
  CHECK(*first_back - (start + 8s) <= 4s); // holds of 1, 2 and at most 4 s from 4 s
  CHECK(static_cast<double>(after_back) / total_after == doctest::Approx(0.25).epsilon(0.2));
}

TEST_CASE("balancer: exclusions") {
  balancer_type b;
  b.assign(4, start - 10s);
  b.observe(0, 1ms, start); // the cheapest, when it may be had
  for (std::size_t i = 1; i < 4; ++i) b.observe(i, 10ms, start);
  seeded_draws draws{3};
  for (int i = 0; i < 500; ++i) {
    // Ejected (not a candidate): never.
    const auto a = b.pick(0b1110, 0, start, draws);
    REQUIRE(a.has_value());
    CHECK(*a != 0);
    // Avoided while others are left: never.
    const auto c = b.pick(0b1111, 0b0011, start, draws);
    REQUIRE(c.has_value());
    CHECK((*c == 2 || *c == 3));
    // Every candidate avoided: the avoided ones serve.
    const auto d = b.pick(0b0011, 0b0011, start, draws);
    REQUIRE(d.has_value());
    CHECK(*d == 0);
  }
  // No candidate, or none in use: none.
  CHECK_FALSE(b.pick(0, 0, start, draws).has_value());
  CHECK_FALSE(b.pick(address_set{1} << 9, 0, start, draws).has_value());
  // First to connect: the balancer makes no choice.
  balancer_options o;
  o.mode = balance_mode::first_to_connect;
  balancer_type off(o);
  off.assign(4, start);
  CHECK_FALSE(off.pick(0b1111, 0, start, draws).has_value());
}

TEST_CASE("balancer: one candidate is answered without a draw") {
  balancer_type b;
  b.assign(5, start);
  seeded_draws draws{1};
  CHECK(b.pick(0b00100, 0, start, draws) == std::optional<std::size_t>(2));
  CHECK(b.pick(0b10110, 0b00110, start, draws) == std::optional<std::size_t>(4));
  CHECK(draws.calls == 0);
  b.pick(0b00110, 0, start, draws);
  CHECK(draws.calls == 2);
}

TEST_CASE("balancer: a longer list is cut, a relist keeps records, a return forgets them") {
  balancer_type b;
  b.assign(100, start);
  CHECK(b.size() == 64);
  seeded_draws draws{5};
  CHECK(b.pick(address_set{1} << 63, 0, start, draws) == std::optional<std::size_t>(63));
  b.assign(3, start - 10s);
  b.observe(1, 7ms, start);
  b.started(1);
  const std::size_t previous[] = {1, balancer_type::npos};
  b.relist(previous, start);
  CHECK(b.size() == 2);
  CHECK(b.estimate(0, start) == ns(7ms));
  CHECK(b.outstanding(0) == 1);
  CHECK(b.weight(0, start) == 1);
  CHECK(b.estimate(1, start) == ns(30ms));
  CHECK(b.weight(1, start) == doctest::Approx(0.1).epsilon(0.01));
  // Back from an ejection: its estimate is forgotten, its requests in
  // flight still count, and it starts slow.
  b.returned(0, start + 1s);
  CHECK(b.estimate(0, start + 1s) == ns(30ms));
  CHECK(b.outstanding(0) == 1);
  CHECK(b.weight(0, start + 1s) == doctest::Approx(0.1).epsilon(0.01));
}

TEST_CASE("balancer: options are checked") {
  CHECK_NOTHROW(coretry::http::detail::check_balancer_options({}));
  const auto refused = [](auto change) {
    balancer_options o;
    change(o);
    CHECK_THROWS_AS(coretry::http::detail::check_balancer_options(o), std::invalid_argument);
  };
  refused([](balancer_options& o) { o.decay = 0ns; });
  refused([](balancer_options& o) { o.default_rtt = -1ns; });
  refused([](balancer_options& o) { o.slow_start_window = -1ns; });
  refused([](balancer_options& o) { o.failure_hold = -1ns; });
  refused([](balancer_options& o) { o.in_flight_bias = 0.05; });
  refused([](balancer_options& o) { o.failure_hold_max = std::chrono::hours(25); });
  refused([](balancer_options& o) { o.slow_start_window = std::chrono::hours(25); });
  refused([](balancer_options& o) { o.in_flight_bias = 4.5; });
  refused([](balancer_options& o) { o.failure_hold_max = o.failure_hold - 1ns; });
  refused([](balancer_options& o) { o.slow_start_aggression = 0; });
  refused([](balancer_options& o) { o.slow_start_aggression = std::nan(""); });
  refused([](balancer_options& o) { o.slow_start_min_weight = 0; });
  refused([](balancer_options& o) { o.slow_start_min_weight = 1.5; });
  // A zero window is allowed: no slow start.
  balancer_options o;
  o.slow_start_window = 0ns;
  CHECK_NOTHROW(coretry::http::detail::check_balancer_options(o));
  balancer_type b(o);
  b.assign(2, start);
  b.returned(1, start);
  CHECK(b.weight(1, start) == 1);
}
