// The concurrency limit in front of a simulated dependency (8 workers x 25
// ms, FIFO, 320 requests a second), on virtual time with Poisson arrivals
// from a seeded source: what it keeps the dependency doing under overload.
// `bench_limit_simulation` prints the same scenarios for more rules and
// seeds (lib/docs/overload.md).

#include "limit_simulation.hpp"

#include <doctest/doctest.h>

using namespace std::chrono_literals;
using coretry::concurrency_limit;
using coretry::duration;
using namespace coretry_limit_sim;

namespace {

config one_client(double load, std::uint64_t seed = 1, concurrency_limit::options o = {}) {
  config c;
  c.seed = seed;
  c.clients.push_back({o, [load](duration) { return load; }});
  return c;
}

} // namespace

TEST_CASE("limit simulation: at 2x and 4x the dependency stays busy with work its callers still want") {
  for (const double load : {2.0, 4.0}) {
    CAPTURE(load);
    simulation s(one_client(load));
    s.run_until(5s);
    s.reset_figures();
    s.run_until(25s);
    const auto& f = s.figures(0);
    CHECK(s.goodput(20s, 0) >= 0.90);
    CHECK(s.wasted_share() <= 0.01);
    CHECK(f.timed_out == 0);
    // Near the workers' count: between 1x and 2x of it, never far above.
    CHECK(f.mean_limit() >= 8.0);
    CHECK(f.mean_limit() <= 16.0);
    CHECK(f.held_max <= 24);
  }
}

TEST_CASE("limit simulation: at 0.8x nothing is shed") {
  for (const std::uint64_t seed : {1, 2}) {
    CAPTURE(seed);
    simulation s(one_client(0.8, seed));
    s.run_until(5s);
    s.reset_figures();
    s.run_until(25s);
    CHECK(s.figures(0).admitted_share() >= 0.995);
    CHECK(s.goodput(20s, 0) >= 0.78);
  }
}

TEST_CASE("limit simulation: after 4x the limit recovers at 0.5x") {
  config c = one_client(0);
  c.clients[0].load = [](duration t) { return t < 10s ? 4.0 : 0.5; };
  simulation s(c);
  s.run_until(11s);
  s.reset_figures();
  s.run_until(20s);
  CHECK(s.figures(0).admitted_share() >= 0.999);
  CHECK(s.goodput(9s, 0) >= 0.48);
  CHECK(s.figures(0).timed_out == 0);
  // Used again at its peaks, the limit climbs back above its overload level
  // (about 1.5 x the 8 workers).
  CHECK(s.figures(0).mean_limit() >= 16.0);
}

TEST_CASE("limit simulation: capacity halved, the permits held follow within 2 s") {
  config c = one_client(2.0);
  c.workers = [](duration t) { return t < 10s ? 8u : 4u; };
  simulation s(c);
  s.run_until(12s); // 2 s after the change
  s.reset_figures();
  s.run_until(20s);
  CHECK(s.figures(0).held_max <= 12); // 3 x the 4 workers left
  CHECK(s.goodput(8s, 0) >= 0.90);    // of the capacity left
  CHECK(s.wasted_share() <= 0.01);
}

TEST_CASE("limit simulation: three limits in front of one dependency share it fairly") {
  config c;
  c.seed = 1;
  // 4x in all; the second joins after 5 s, the third after 10 s.
  c.clients.push_back({{}, [](duration) { return 4.0 / 3; }});
  c.clients.push_back({{}, [](duration t) { return t < 5s ? 0.0 : 4.0 / 3; }});
  c.clients.push_back({{}, [](duration t) { return t < 10s ? 0.0 : 4.0 / 3; }});
  simulation s(c);
  s.run_until(20s);
  s.reset_figures();
  s.run_until(40s);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(s.goodput(20s, i) >= 0.5 / 3); // at least half an equal share
  }
  CHECK(s.total_goodput(20s) >= 0.85);
  CHECK(s.wasted_share() <= 0.05);
}

TEST_CASE("limit simulation: the latency rule against drops alone, and against no limit") {
  // The same 4x overload. Drops alone (tolerance too high to matter: plain
  // AIMD) grow the limit until attempts time out, so the dependency works
  // off abandoned requests; with no limit at all, the queue outgrows the
  // attempts' timeout and nothing succeeds.
  auto drops_only = concurrency_limit::options{};
  drops_only.tolerance = 1000;
  auto unlimited = concurrency_limit::options{};
  unlimited.adaptive = false;
  unlimited.initial_limit = 1'000'000;
  double goodput[3], wasted[3];
  int i = 0;
  for (const auto& o : {concurrency_limit::options{}, drops_only, unlimited}) {
    simulation s(one_client(4.0, 1, o));
    s.run_until(5s);
    s.reset_figures();
    s.run_until(25s);
    goodput[i] = s.goodput(20s, 0);
    wasted[i] = s.wasted_share();
    ++i;
  }
  CHECK(goodput[0] >= 0.90);
  CHECK(wasted[0] <= 0.01);
  CHECK(goodput[1] <= 0.85);
  CHECK(wasted[1] >= 0.10);
  CHECK(goodput[2] <= 0.05);
  CHECK(wasted[2] >= 0.90);
}
