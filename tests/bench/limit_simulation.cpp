// Concurrency limits in front of a simulated dependency (8 workers x 25 ms,
// FIFO, 320 requests a second; attempts time out after 250 ms), on virtual
// time with Poisson arrivals from seeded sources (tests/unit/limit_simulation.hpp),
// for four rules: the adaptive default, drops alone (plain AIMD: tolerance
// 1000), a fixed limit of 20, and no limit. For each seed: offered 0.8x to
// 10x (measured over 20 s after 5 s), 4x then 0.5x, capacity halved at 2x,
// and three limits sharing the dependency at 4x in all.
//
//   bench_limit_simulation [first_seed=1] [seeds=1]

#include "limit_simulation.hpp"

#include <cstdio>
#include <string>

using namespace coretry_limit_sim;
using coretry::concurrency_limit;

namespace {

/// The rule named `name`: adaptive, drops-only, fixed20 or none.
concurrency_limit::options algo(const std::string& name) {
  concurrency_limit::options o;
  if (name == "drops-only") o.tolerance = 1000;
  if (name == "fixed20") o.adaptive = false;
  if (name == "none") {
    o.adaptive = false;
    o.initial_limit = 1000000;
  }
  return o;
}

} // namespace

int main(int argc, char** argv) {
  const std::uint64_t first = argc > 1 ? std::stoull(argv[1]) : 1;
  const std::uint64_t seeds = argc > 2 ? std::stoull(argv[2]) : 1;
  for (std::uint64_t seed = first; seed < first + seeds; ++seed) {
    std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
    for (std::string a : {"adaptive", "drops-only", "fixed20", "none"}) {
      for (double load : {0.8, 2.0, 4.0, 10.0}) {
        config c;
        c.seed = seed;
        c.clients.push_back({algo(a), [load](duration) { return load; }});
        simulation s(c);
        s.run_until(5s);
        s.reset_figures();
        s.run_until(25s);
        auto& f = s.figures(0);
        std::printf("%-10s load %4.1f: admitted %6.2f%% goodput %5.1f%% wasted %5.1f%% limit %6.1f held %5.1f max %u "
                    "base %.1fms\n",
                    a.c_str(), load, 100 * f.admitted_share(), 100 * s.goodput(20s, 0), 100 * s.wasted_share(),
                    f.mean_limit(), f.mean_held(), f.held_max,
                    std::chrono::duration<double, std::milli>(s.limit(0).baseline()).count());
      }
      { // recovery 4x -> 0.5x
        config c;
        c.seed = seed;
        c.clients.push_back({algo(a), [](duration t) { return t < 10s ? 4.0 : 0.5; }});
        simulation s(c);
        s.run_until(10s);
        s.reset_figures();
        s.run_until(11s);
        auto f1 = s.figures(0);
        s.reset_figures();
        s.run_until(20s);
        auto& f = s.figures(0);
        std::printf("%-10s 4x->0.5x: first s admitted %6.2f%%, then admitted %6.2f%% goodput %5.1f%% limit %5.1f\n",
                    a.c_str(), 100 * f1.admitted_share(), 100 * f.admitted_share(), 100 * s.goodput(9s, 0),
                    f.mean_limit());
      }
      { // capacity halved
        config c;
        c.seed = seed;
        c.workers = [](duration t) { return t < 10s ? 8u : 4u; };
        c.clients.push_back({algo(a), [](duration) { return 2.0; }});
        simulation s(c);
        s.run_until(10s);
        s.reset_figures();
        s.run_until(12s);
        auto f1 = s.figures(0);
        s.reset_figures();
        s.run_until(20s);
        auto& f = s.figures(0);
        std::printf("%-10s halved: first 2 s held max %u mean %.1f; then held max %u mean %.1f goodput %5.1f%% wasted "
                    "%5.1f%%\n",
                    a.c_str(), f1.held_max, f1.mean_held(), f.held_max, f.mean_held(), 100 * s.goodput(8s, 0),
                    100 * s.wasted_share());
      }
      { // three clients
        config c;
        c.seed = seed;
        for (int i = 0; i < 3; ++i)
          c.clients.push_back({algo(a), [](duration) { return 4.0 / 3; }});
        // unequal start: client 0 begins alone
        c.clients[1].load = [](duration t) { return t < 5s ? 0.0 : 4.0 / 3; };
        c.clients[2].load = [](duration t) { return t < 10s ? 0.0 : 4.0 / 3; };
        simulation s(c);
        s.run_until(20s);
        s.reset_figures();
        s.run_until(40s);
        std::printf("%-10s three: goodput %5.1f%% %5.1f%% %5.1f%% total %5.1f%% limits %.1f %.1f %.1f wasted %5.1f%%\n",
                    a.c_str(), 100 * s.goodput(20s, 0), 100 * s.goodput(20s, 1), 100 * s.goodput(20s, 2),
                    100 * s.total_goodput(20s), s.figures(0).mean_limit(), s.figures(1).mean_limit(),
                    s.figures(2).mean_limit(), 100 * s.wasted_share());
      }
    }
  }
}
