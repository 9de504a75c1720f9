// The herd's command-line checks: every bad value is a usage error that
// names the option and the problem.

#include "herd/herd_options.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace std::chrono_literals;

namespace {

std::string usage_message(const herd::arguments& args) {
  try {
    (void)herd::make_plan(args, 1);
  } catch (const herd::usage_error& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("durations take a unit") {
  CHECK(herd::parse_duration("--x", "500ms") == 500ms);
  CHECK(herd::parse_duration("--x", "2s") == 2s);
  CHECK(herd::parse_duration("--x", "1.5s") == 1500ms);
  CHECK(herd::parse_duration("--x", "250us") == 250us);
  CHECK(herd::parse_duration("--x", "0") == herd::duration::zero());
  CHECK_THROWS_WITH_AS(herd::parse_duration("--outage", "-1s"), "--outage: '-1s' is negative; durations must be 0 or more",
                       herd::usage_error);
  CHECK_THROWS_WITH_AS(herd::parse_duration("--cap", "2"),
                       "--cap: '2' has no unit; give one of ns, us, ms, s, min (for example 500ms)", herd::usage_error);
  CHECK_THROWS_AS(herd::parse_duration("--cap", "2h"), herd::usage_error);
  CHECK_THROWS_AS(herd::parse_duration("--cap", "ms"), herd::usage_error);
  CHECK_THROWS_AS(herd::parse_duration("--cap", "1e400s"), herd::usage_error);
  CHECK_THROWS_AS(herd::parse_duration("--cap", "2days"), herd::usage_error);
}

TEST_CASE("client counts: ranges and lists") {
  CHECK(herd::parse_client_counts("--c", "10:50:20") == std::vector<unsigned>{10, 30, 50});
  CHECK(herd::parse_client_counts("--c", "5,7") == std::vector<unsigned>{5, 7});
  CHECK_THROWS_WITH_AS(herd::parse_client_counts("--contention-clients", "0,10"),
                       "--contention-clients: '0,10' contains 0: a run needs at least 1 client", herd::usage_error);
  CHECK_THROWS_AS(herd::parse_client_counts("--c", "10:5:1"), herd::usage_error);
  CHECK_THROWS_AS(herd::parse_client_counts("--c", "10:20"), herd::usage_error);
  CHECK_THROWS_AS(herd::parse_client_counts("--c", "ten"), herd::usage_error);
  CHECK_THROWS_AS(herd::parse_client_counts("--c", "1:20:0"), herd::usage_error);
}

TEST_CASE("the plan refuses bad values naming the option") {
  herd::arguments args;
  CHECK(usage_message(args).empty());
  args.outage_clients = 0;
  CHECK(usage_message(args) == "--clients: 0 is out of range; give 1 to 1000000");
  args = {};
  args.capacity = -5;
  CHECK(usage_message(args) == "--capacity: -5 is out of range; give 1 to 100000000");
  args = {};
  args.service_time = "-10ms";
  CHECK(usage_message(args).starts_with("--service-time: '-10ms' is negative"));
  args = {};
  args.cap = "1ms";
  CHECK(usage_message(args) == "--cap: 1ms is smaller than --base 5ms");
  args = {};
  args.strategies = "full,wild";
  CHECK(usage_message(args).starts_with("--strategies: 'wild' is not a strategy"));
  args = {};
  args.budget = "maybe";
  CHECK(usage_message(args) == "--budget: 'maybe' is not off, on or both");
  args = {};
  args.gate = "sometimes";
  CHECK(usage_message(args) == "--gate: 'sometimes' is not off, on or both");
  args = {};
  args.deadline = "0";
  CHECK(usage_message(args) == "--deadline: 0 is not positive");
  args = {};
  args.scenario = "stampede";
  CHECK(usage_message(args) == "SCENARIO: 'stampede' is not contention, outage or all");
  args = {};
  args.runs = 0;
  CHECK(usage_message(args) == "--runs: 0 is out of range; give 1 to 100000");
}

TEST_CASE("the seed given wins and otherwise the default one is used") {
  herd::arguments args;
  CHECK(herd::make_plan(args, 99).seed == 99);
  CHECK(herd::make_plan(args, 99).contention_study_.seed == 99);
  args.seed = 5;
  const auto p = herd::make_plan(args, 99);
  CHECK(p.seed == 5);
  CHECK(p.outage_study_.seed == 5);
  args.scenario = "outage";
  CHECK_FALSE(herd::make_plan(args, 1).contention);
}

TEST_CASE("fleet options: processes, fleet modes and the reconciliation period") {
  herd::arguments args;
  CHECK(herd::make_plan(args, 1).outage_study_.fleets == std::vector<herd::fleet_mode>{herd::fleet_mode::local});
  args.processes = 10;
  auto p = herd::make_plan(args, 1);
  CHECK(p.outage_study_.config.processes == 10);
  CHECK(p.outage_study_.fleets ==
        std::vector<herd::fleet_mode>{herd::fleet_mode::local, herd::fleet_mode::shared});
  CHECK(p.outage_study_.config.reconcile == 50ms);
  args.fleet = "shared";
  args.reconcile = "20ms";
  p = herd::make_plan(args, 1);
  CHECK(p.outage_study_.fleets == std::vector<herd::fleet_mode>{herd::fleet_mode::shared});
  CHECK(p.outage_study_.config.reconcile == 20ms);

  args = {};
  args.processes = 0;
  CHECK(usage_message(args) == "--processes: 0 is out of range; give 1 to 10000");
  args.processes = 10001;
  CHECK(usage_message(args) == "--processes: 10001 is out of range; give 1 to 10000");
  args.processes = 20;
  args.outage_clients = 10;
  CHECK(usage_message(args) == "--processes: 20 is more than the 10 clients (--clients); every process needs one");
  args = {};
  args.fleet = "global";
  CHECK(usage_message(args) == "--fleet: 'global' is not local, shared or both");
  args = {};
  args.reconcile = "0";
  CHECK(usage_message(args) == "--reconcile: 0 is out of range; give 1ms to 60s");
  args.reconcile = "61s";
  CHECK(usage_message(args) == "--reconcile: 61s is out of range; give 1ms to 60s");
  args.reconcile = "999us";
  CHECK(usage_message(args) == "--reconcile: 999us is out of range; give 1ms to 60s");
  args.reconcile = "50";
  CHECK(usage_message(args).starts_with("--reconcile: '50' has no unit"));
  args.reconcile = "60s";
  CHECK(usage_message(args).empty());
  args.reconcile = "1ms";
  CHECK(usage_message(args).empty());
}
