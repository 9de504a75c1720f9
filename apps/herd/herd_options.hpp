#ifndef CORETRY_HERD_OPTIONS_HPP
#define CORETRY_HERD_OPTIONS_HPP

// The herd program's command line, checked: every problem is a usage_error
// whose message names the option and what is wrong with its value.

#include "herd/herd_sim.hpp"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace herd {

/// A bad command line (the program exits with status 2).
class usage_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// "250ms", "2s", "1.5s", "100us", "10ns" or "0". Throws usage_error naming
/// `option` when the text is not a non-negative duration with a unit.
duration parse_duration(std::string_view option, std::string_view text);
/// "10:100:10" (first:last:step) or "10,20,50"; every count at least 1.
std::vector<unsigned> parse_client_counts(std::string_view option, std::string_view text);
/// "all" or a comma-separated list of strategy names.
std::vector<strategy> parse_strategies(std::string_view option, std::string_view text);
/// "off", "on" or "both" (--budget, --gate).
std::vector<bool> parse_budgets(std::string_view option, std::string_view text);
/// "local", "shared" or "both" (--fleet).
std::vector<fleet_mode> parse_fleets(std::string_view option, std::string_view text);

/// The command line as given (durations as text, so that they are checked
/// with the option's name).
struct arguments {
  std::string scenario = "all"; ///< contention, outage or all
  std::optional<std::uint64_t> seed;
  std::string strategies = "all";
  std::string budget = "both";
  std::string gate = "both"; ///< the outage scenario only
  long long runs = 10;
  std::string contention_clients = "10:100:10";
  std::string base = "5ms";
  std::string cap = "2s";
  std::string net_mean = "10ms";
  std::string net_sd = "2ms";
  long long outage_clients = 1000;
  std::string outage = "1s";
  long long capacity = 100;
  std::string service_time = "10ms";
  long long max_attempts = 10;
  std::string deadline = "30s";
  std::string outage_base = "100ms";
  std::string outage_cap = "2s";
  long long processes = 1;   ///< the outage's clients are spread over this many processes
  std::string fleet;         ///< local, shared or both; empty: both with 2 processes or more, else local
  std::string reconcile = "50ms";
  std::string out_dir = "herd-out";
  bool chart = true;
};

/// What to run, fully decided.
struct plan {
  bool contention = true;
  bool outage = true;
  std::uint64_t seed = 0;
  contention_study contention_study_{};
  outage_study outage_study_{};
  std::string out_dir;
  bool chart = true;
};

/// Checks everything; `seed` is used when the arguments give none.
plan make_plan(const arguments& args, std::uint64_t seed);

} // namespace herd

#endif
