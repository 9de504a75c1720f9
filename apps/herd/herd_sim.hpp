#ifndef CORETRY_HERD_SIM_HPP
#define CORETRY_HERD_SIM_HPP

// The herd: many clients that fail together, each retrying through the real
// coretry engine (coretry::async_retry on coretry::testing::manual_timer), on
// virtual time. Nothing here models the engine: the waits, budget decisions
// and stops are coretry's own. What is modelled is the world around it: the
// network (delays drawn from |Normal(mean, sd)|) and the dependency.
//
// Two dependencies:
// - contention: the optimistic-concurrency row of the AWS "Exponential
//   Backoff and Jitter" study. An attempt reads the row's version, then
//   writes it; the write succeeds only if no other write succeeded in between.
//   Every message crosses the network (4 delays per attempt).
// - outage: a dependency that answers every request with a failure for the
//   first `outage` of the run, then serves at most `capacity` requests at a
//   time (each takes `service_time`) and turns away the ones beyond that.
//
// Everything is reproducible: a run's draws come only from its seed.

#include <coretry/policy.hpp>
#include <coretry/stop_reason.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace herd {

using coretry::duration;
using namespace std::chrono_literals;

/// The retry strategies compared: the five of the AWS study.
enum class strategy {
  no_backoff,   ///< retry at once (windows of zero)
  exponential,  ///< capped exponential windows, waited in full (jitter none)
  full,         ///< full jitter
  equal,        ///< equal jitter
  decorrelated, ///< decorrelated jitter
};
inline constexpr std::array<strategy, 5> all_strategies{strategy::no_backoff, strategy::exponential, strategy::full,
                                                        strategy::equal, strategy::decorrelated};
std::string_view to_string(strategy s) noexcept;
std::optional<strategy> parse_strategy(std::string_view name) noexcept;

/// The coretry backoff policy a strategy stands for: windows doubling from
/// `base` up to `cap` (all zero for no_backoff) and the strategy's jitter.
coretry::backoff_policy backoff_for(strategy s, duration base, duration cap);

/// One-way network delay: |Normal(mean, sd)|.
struct network_model {
  duration mean = 10ms;
  duration sd = 2ms;
};

/// Width of the buckets in which arrivals at the dependency are counted.
inline constexpr duration bucket_width = 10ms;

/// The budget used when a run has one: coretry's default token bucket
/// (capacity 20, 0.1 token per initial request), shared by all clients.
inline constexpr double budget_capacity = 20.0;
inline constexpr double budget_tokens_per_initial_request = 0.1;
/// Shared fleets: the most tokens a process holds leased (coretry::leased_budget's default).
inline constexpr unsigned lease_size = 5;

/// How the processes of a fleet (outage_config::processes) hold their retry
/// budget and gate.
enum class fleet_mode {
  /// Each process has its own coretry::token_bucket_budget and its own
  /// coretry::local_gate, as if alone: K processes give K times the retry
  /// allowance and K times the probes.
  local,
  /// Each process has a coretry::leased_budget and a coretry::local_gate,
  /// reconciled every `reconcile` with a model of the Redis exchange script
  /// (fleet_store), as coretry::redis::shared_state does: one fleet-wide
  /// bucket, gate health judged on the fleet's results, slots spaced by the
  /// number of live processes.
  shared,
};
std::string_view to_string(fleet_mode f) noexcept;

/// What every run has in common.
struct run_config {
  unsigned clients = 10;
  strategy retry = strategy::full;
  bool budget = false;
  bool gate = false; ///< one coretry::local_gate (default options) shared by all clients
  duration base = 5ms;
  duration cap = 2s;
  network_model network{};
  std::uint64_t seed = 1;
};

/// The contention scenario: attempts are unlimited, as in the study (a run
/// ends when every client has written, or when the budget stops it).
struct contention_config : run_config {};

/// The outage scenario.
struct outage_config : run_config {
  /// 1,000 clients; windows from 100 ms (the specification's first window) to 2 s.
  outage_config() {
    clients = 1000;
    base = 100ms;
  }
  duration outage = 1s;           ///< the dependency fails everything before this instant
  unsigned capacity = 100;        ///< requests served at once after the outage
  duration service_time = 10ms;   ///< how long serving one takes
  unsigned max_attempts = 10;     ///< per client, including the first
  duration attempt_limit = 1s;    ///< per attempt (never reached by this dependency)
  duration deadline = 30s;        ///< each client's overall deadline
  /// The clients are spread evenly over this many processes (client i in
  /// process i x processes / clients), each with its own budget and gate.
  unsigned processes = 1;
  fleet_mode fleet = fleet_mode::local;
  /// shared: each process exchanges with the fleet's store this often, at its
  /// own phase (the phases spread evenly over the period, offset by the
  /// seed); each exchange is instantaneous.
  duration reconcile = 50ms;
};

/// What one run measured.
struct run_result {
  unsigned clients = 0;
  std::uint64_t calls = 0;   ///< attempts that reached the dependency (contention: writes)
  std::uint64_t retries = 0; ///< calls that were not a client's first
  unsigned succeeded = 0;
  unsigned budget_stops = 0; ///< clients stopped by budget_exhausted
  unsigned gate_stops = 0;   ///< clients stopped by dependency_unhealthy
  std::uint64_t failed_retries_in_outage = 0; ///< outage: retries that reached the dependency while it was down
  std::uint64_t rejected_after_recovery = 0;  ///< outage: calls turned away for capacity once it was back
  duration completion{};     ///< when the last client's operation ended
  std::vector<unsigned> attempts;          ///< per client
  std::vector<coretry::stop_reason> stops; ///< per client
  std::vector<duration> ended;             ///< per client: when its operation ended
  std::vector<std::uint32_t> arrivals;       ///< per 10 ms bucket: calls arriving at the dependency
  std::vector<std::uint32_t> retry_arrivals; ///< per 10 ms bucket: the retries among them
  /// Gate runs: the instants at which a gate admitted a retry while it was
  /// not open (a probe), every process's gate together, in order.
  std::vector<duration> probes;
  /// Gate runs: per process, when its gate first closed (absent: never).
  std::vector<std::optional<duration>> gate_closed;
};

/// Runs one scenario once through coretry::async_retry on virtual time.
run_result run_contention(const contention_config& config);
run_result run_outage(const outage_config& config);

/// The largest bucket of `buckets` from index `from` on (0 if none).
std::uint32_t peak(const std::vector<std::uint32_t>& buckets, std::size_t from = 0) noexcept;
/// The q-quantile (0..1, nearest rank) of `values`; zero when empty.
duration percentile(std::vector<duration> values, double q);

/// Derives the seed of one run from the study's seed and the run's identity,
/// so that every strategy sees the same network draws for the same
/// (clients, run) pair and a study is replayed exactly from its seed.
std::uint64_t run_seed(std::uint64_t study_seed, std::string_view scenario, unsigned clients, unsigned run) noexcept;

/// Called after each run: runs done, runs in all, what just ran.
using progress_fn = std::function<void(std::size_t done, std::size_t total, const std::string& what)>;

/// The contention study: every client count x strategy x budget, `runs` times each.
struct contention_study {
  std::vector<unsigned> client_counts{10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
  std::vector<strategy> strategies{all_strategies.begin(), all_strategies.end()};
  std::vector<bool> budgets{false, true};
  unsigned runs = 10;
  duration base = 5ms;
  duration cap = 2s;
  network_model network{};
  std::uint64_t seed = 1;
};

struct contention_row {
  unsigned clients = 0;
  strategy retry{};
  bool budget = false;
  unsigned runs = 0;
  double mean_calls = 0;          ///< calls to the row per run
  double mean_completion_ms = 0;  ///< time until the last client finished, per run
  double success_rate = 0;        ///< clients that wrote, over all runs
};

std::vector<contention_row> run_contention_study(const contention_study& study, const progress_fn& progress = {});

/// Shared fleets: when process `process` first exchanges with the store (then
/// every `reconcile`): the phases are spread evenly over the period, all
/// offset by a draw from the run's seed smaller than their spacing.
duration reconcile_phase(const outage_config& config, unsigned process) noexcept;

/// Probes per second admitted by all the gates of a fleet while every one of
/// them was closed: from the instant the last of them closed to the end of
/// the outage. Absent when a gate did not close before the outage ended.
std::optional<double> fleet_probe_rate(const outage_config& config, const run_result& result);

/// The outage study: every fleet mode x gate x budget x strategy, once each,
/// on the same seed.
struct outage_study {
  outage_config config{}; ///< retry, budget, gate, fleet and seed are set per run
  std::vector<strategy> strategies{all_strategies.begin(), all_strategies.end()};
  std::vector<bool> budgets{false, true};
  std::vector<bool> gates{false};
  std::vector<fleet_mode> fleets{fleet_mode::local};
  std::uint64_t seed = 1;
};

/// Whether a study spreads its clients over processes or shares state: its
/// reports then say which fleet mode and how many processes each row had.
bool is_fleet_study(const outage_study& study) noexcept;

struct outage_row {
  strategy retry{};
  bool budget = false;
  bool gate = false;
  unsigned clients = 0;
  std::uint64_t calls = 0;
  std::uint64_t retries = 0;
  double attempts_per_client = 0;
  unsigned max_attempts_per_client = 0;
  double success_rate = 0;
  unsigned budget_stops = 0;
  unsigned gate_stops = 0;
  std::uint64_t failed_retries_in_outage = 0;
  std::uint64_t rejected_after_recovery = 0;
  std::uint32_t peak_arrivals = 0;          ///< calls per 10 ms, whole run
  std::uint32_t peak_retry_arrivals = 0;    ///< retries per 10 ms, whole run
  std::uint32_t peak_after_recovery = 0;    ///< calls per 10 ms once the dependency is back
  duration p50{}, p90{}, p99{}, max{};      ///< time to success of the clients that succeeded
  duration completion{};                    ///< when the last client finished
  std::vector<std::uint32_t> arrivals;      ///< per 10 ms bucket
  unsigned processes = 1;
  fleet_mode fleet = fleet_mode::local;
  duration reconcile{};
  /// Calls per client (the clients' own requests make 1).
  double amplification = 0;
  std::optional<double> fleet_probes_per_s; ///< see fleet_probe_rate
};

outage_row summarize_outage(const outage_config& config, const run_result& result);
std::vector<outage_row> run_outage_study(const outage_study& study, const progress_fn& progress = {});

} // namespace herd

#endif
