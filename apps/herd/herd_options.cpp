#include "herd/herd_options.hpp"

#include <common/quoting.hpp>

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

namespace herd {
namespace {

using coretry::common::quoted;

[[noreturn]] void bad(std::string_view option, std::string_view text, std::string_view why) {
  throw usage_error(std::string(option) + ": " + quoted(text) + " " + std::string(why));
}

long long check_count(std::string_view option, long long value, long long low, long long high) {
  if (value < low || value > high)
    throw usage_error(std::string(option) + ": " + std::to_string(value) + " is out of range; give " +
                      std::to_string(low) + " to " + std::to_string(high));
  return value;
}

unsigned parse_count(std::string_view option, std::string_view whole, std::string_view text) {
  unsigned long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size())
    bad(option, whole, "is not a list of client counts such as 10:100:10 or 10,50,100");
  if (value == 0) bad(option, whole, "contains 0: a run needs at least 1 client");
  if (value > 100000) bad(option, whole, "asks for more than 100000 clients");
  return static_cast<unsigned>(value);
}

std::vector<std::string_view> split(std::string_view text, char by) {
  std::vector<std::string_view> parts;
  for (;;) {
    const auto at = text.find(by);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
}

} // namespace

duration parse_duration(std::string_view option, std::string_view text) {
  if (text == "0") return duration::zero();
  if (!text.empty() && text.front() == '-') bad(option, text, "is negative; durations must be 0 or more");
  std::size_t unit_at = 0;
  while (unit_at < text.size() && (std::isdigit(static_cast<unsigned char>(text[unit_at])) || text[unit_at] == '.'))
    ++unit_at;
  const std::string_view number = text.substr(0, unit_at);
  const std::string_view unit = text.substr(unit_at);
  double value = 0;
  const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || error != std::errc{} || end != number.data() + number.size())
    bad(option, text, "is not a duration; give a number and a unit, such as 500ms or 2s");
  double ns_per_unit = 0;
  if (unit == "ns") ns_per_unit = 1;
  else if (unit == "us") ns_per_unit = 1e3;
  else if (unit == "ms") ns_per_unit = 1e6;
  else if (unit == "s") ns_per_unit = 1e9;
  else if (unit == "min") ns_per_unit = 60e9;
  else if (unit.empty()) bad(option, text, "has no unit; give one of ns, us, ms, s, min (for example 500ms)");
  else bad(option, text, "has an unknown unit; give one of ns, us, ms, s, min (for example 500ms)");
  const double ns = value * ns_per_unit;
  if (!std::isfinite(ns) || ns > 24 * 3600 * 1e9) bad(option, text, "is longer than a day");
  return duration(static_cast<duration::rep>(std::llround(ns)));
}

std::vector<unsigned> parse_client_counts(std::string_view option, std::string_view text) {
  std::vector<unsigned> counts;
  if (text.find(':') != std::string_view::npos) {
    const auto parts = split(text, ':');
    if (parts.size() != 3) bad(option, text, "is not a range first:last:step such as 10:100:10");
    const unsigned first = parse_count(option, text, parts[0]);
    const unsigned last = parse_count(option, text, parts[1]);
    const unsigned step = parse_count(option, text, parts[2]);
    if (last < first) bad(option, text, "ends before it starts");
    for (unsigned n = first; n <= last; n += step) counts.push_back(n);
  } else {
    for (std::string_view part : split(text, ',')) counts.push_back(parse_count(option, text, part));
  }
  if (counts.size() > 1000) bad(option, text, "asks for more than 1000 client counts");
  return counts;
}

std::vector<strategy> parse_strategies(std::string_view option, std::string_view text) {
  if (text == "all") return {all_strategies.begin(), all_strategies.end()};
  std::vector<strategy> chosen;
  for (std::string_view part : split(text, ',')) {
    const auto s = parse_strategy(part);
    if (!s) bad(option, part, "is not a strategy; give all or some of no-backoff,exponential,full,equal,decorrelated");
    chosen.push_back(*s);
  }
  return chosen;
}

std::vector<bool> parse_budgets(std::string_view option, std::string_view text) {
  if (text == "off") return {false};
  if (text == "on") return {true};
  if (text == "both") return {false, true};
  bad(option, text, "is not off, on or both");
}

std::vector<fleet_mode> parse_fleets(std::string_view option, std::string_view text) {
  if (text == "local") return {fleet_mode::local};
  if (text == "shared") return {fleet_mode::shared};
  if (text == "both") return {fleet_mode::local, fleet_mode::shared};
  bad(option, text, "is not local, shared or both");
}

plan make_plan(const arguments& args, std::uint64_t seed) {
  plan p;
  if (args.scenario == "contention") p.outage = false;
  else if (args.scenario == "outage") p.contention = false;
  else if (args.scenario != "all") bad("SCENARIO", args.scenario, "is not contention, outage or all");
  p.seed = args.seed.value_or(seed);
  p.out_dir = args.out_dir;
  if (p.out_dir.empty()) throw usage_error("--out: the output directory must not be empty");
  p.chart = args.chart;

  const auto strategies = parse_strategies("--strategies", args.strategies);
  const auto budgets = parse_budgets("--budget", args.budget);
  network_model net{parse_duration("--net-mean", args.net_mean), parse_duration("--net-sd", args.net_sd)};

  contention_study& c = p.contention_study_;
  c.client_counts = parse_client_counts("--contention-clients", args.contention_clients);
  c.strategies = strategies;
  c.budgets = budgets;
  c.runs = static_cast<unsigned>(check_count("--runs", args.runs, 1, 100000));
  c.base = parse_duration("--base", args.base);
  c.cap = parse_duration("--cap", args.cap);
  if (c.cap < c.base) throw usage_error("--cap: " + args.cap + " is smaller than --base " + args.base);
  c.network = net;
  c.seed = p.seed;

  outage_study& o = p.outage_study_;
  o.strategies = strategies;
  o.budgets = budgets;
  o.gates = parse_budgets("--gate", args.gate);
  o.seed = p.seed;
  outage_config& oc = o.config;
  oc.clients = static_cast<unsigned>(check_count("--clients", args.outage_clients, 1, 1000000));
  oc.outage = parse_duration("--outage", args.outage);
  oc.capacity = static_cast<unsigned>(check_count("--capacity", args.capacity, 1, 100000000));
  oc.service_time = parse_duration("--service-time", args.service_time);
  oc.max_attempts = static_cast<unsigned>(check_count("--max-attempts", args.max_attempts, 1, 1000));
  oc.base = parse_duration("--outage-base", args.outage_base);
  oc.cap = parse_duration("--outage-cap", args.outage_cap);
  if (oc.cap < oc.base)
    throw usage_error("--outage-cap: " + args.outage_cap + " is smaller than --outage-base " + args.outage_base);
  oc.network = net;
  oc.deadline = parse_duration("--deadline", args.deadline);
  if (oc.deadline <= duration::zero()) throw usage_error("--deadline: " + args.deadline + " is not positive");
  oc.processes = static_cast<unsigned>(check_count("--processes", args.processes, 1, 10000));
  if (oc.processes > oc.clients)
    throw usage_error("--processes: " + std::to_string(oc.processes) + " is more than the " +
                      std::to_string(oc.clients) + " clients (--clients); every process needs one");
  o.fleets = args.fleet.empty() ? (oc.processes > 1 ? parse_fleets("--fleet", "both") : parse_fleets("--fleet", "local"))
                                : parse_fleets("--fleet", args.fleet);
  oc.reconcile = parse_duration("--reconcile", args.reconcile);
  if (oc.reconcile < 1ms || oc.reconcile > 60s)
    throw usage_error("--reconcile: " + args.reconcile + " is out of range; give 1ms to 60s");
  return p;
}

} // namespace herd
