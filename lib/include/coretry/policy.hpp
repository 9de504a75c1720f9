#ifndef CORETRY_POLICY_HPP
#define CORETRY_POLICY_HPP

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace coretry {

/// The unit of every duration coretry computes with. Policies accept any
/// std::chrono duration that converts without loss (ms, s, ...).
using duration = std::chrono::nanoseconds;

namespace detail {
/// a + b for non-negative `b`, saturating at duration::max().
constexpr duration saturating_add(duration a, duration b) noexcept {
  return a > duration::max() - b ? duration::max() : a + b;
}
} // namespace detail

/// How a wait is drawn from the current backoff window.
enum class jitter_kind {
  none,         ///< wait the whole window
  full,         ///< uniform in [0, window]
  equal,        ///< half the window plus uniform in [0, window / 2]
  decorrelated, ///< uniform in [initial, 3 x previous wait], capped
};

std::string_view to_string(jitter_kind kind) noexcept;
/// Parses "none", "full", "equal" or "decorrelated".
std::optional<jitter_kind> parse_jitter_kind(std::string_view name) noexcept;

/// Exponential backoff: the window for retry r (r = 0 is the first retry) is
/// min(max_window, initial_window x multiplier^r). The cap limits the window,
/// never the number of attempts or the total time.
struct backoff_policy {
  duration initial_window = std::chrono::milliseconds(100);
  double multiplier = 2.0;
  duration max_window = std::chrono::seconds(1);
  jitter_kind jitter = jitter_kind::full;
  /// Minimum local wait (explicit pacing); zero means none. A floor turns full
  /// jitter into a modified policy: waits are never shorter than this.
  duration floor = duration::zero();
};

/// Hedging: backup attempts sent while an earlier one is still running, for
/// the slow tail. Off by default (max_hedges 0). Only for operations that are
/// safe to repeat (async_retry throws std::invalid_argument otherwise).
struct hedging_policy {
  /// The most attempts in flight beside the first one (0: hedging off). At
  /// most policy::max_hedges_cap.
  unsigned max_hedges = 0;
  /// How long after the latest attempt started the next hedge is sent, unless
  /// that attempt has ended by then. Positive when hedging is on. Unused when
  /// delay_percentile is set.
  duration delay = std::chrono::milliseconds(50);
  /// When set, the delay is this percentile (in percent, above 0 and at most
  /// 100) of the recent successful attempts a latency_tracker holds
  /// (retry_options::tracker), read as its bucket's upper edge: at least
  /// 1 ms and at most the latest attempt's limit. No hedge is sent on a delay
  /// until the tracker's window holds `min_successes` successes (a transient
  /// failure's immediate hedge still is).
  std::optional<double> delay_percentile;
  /// Successes the window must hold before a percentile delay is used (1 to 1,000,000).
  unsigned min_successes = 100;
};

/// Attempt limits chosen from what the dependency is observed to do: each
/// attempt's limit is `margin` x the `percentile` of the recent successful
/// attempts a latency_tracker holds (retry_options::tracker), clamped to
/// [floor, ceiling] and, as every limit, to the remaining time less the
/// completion reserve. Until the tracker's window holds `warm_up`
/// successes, the limit is the ceiling. When more than half of the
/// window's attempts (at least 10) ended at their limit, the limit is at
/// least twice the longest limit they ended at: a dependency that became
/// slower than the limit is learnt by doubling, as TCP's retransmission
/// timer does.
struct observed_limit {
  /// The percentile of successful attempts, in percent (above 0, at most 100).
  double percentile = 99.9;
  /// The limit is this many times the percentile (1 to 100).
  double margin = 1.5;
  /// The shortest limit (positive).
  duration floor = std::chrono::milliseconds(10);
  /// The longest limit; duration::max(): the remaining time less the reserve.
  duration ceiling = duration::max();
  /// Successes the window must hold before its percentile is used (0 to 1,000,000).
  unsigned warm_up = 50;
};

/// A retry policy: a plain value. The defaults are the book-detail read of the
/// specification: 3 attempts, 1000 ms overall, 250 ms per attempt, 100 ms
/// minimum allowance, 50 ms completion reserve, windows 100 ms then 200 ms.
struct policy {
  /// Attempts including the first: 3 means one initial attempt and at most two retries.
  unsigned max_attempts = 3;
  /// The whole operation's allowance, fixed once when it starts, on the
  /// timer's monotonic clock. duration::max() means no overall deadline.
  duration overall_deadline = std::chrono::milliseconds(1000);
  /// Limit of one complete attempt (unused when `observed` is set).
  duration attempt_limit = std::chrono::milliseconds(250);
  /// When set, each attempt's limit comes from the dependency's observed
  /// latencies instead of attempt_limit; the operation then needs a
  /// latency tracker (retry_options::tracker).
  std::optional<observed_limit> observed;
  /// Never start an attempt with less time than this remaining (less the
  /// reserve). An observed limit may be shorter.
  duration min_attempt_allowance = std::chrono::milliseconds(100);
  /// Time kept back from the overall deadline to return the result.
  duration completion_reserve = std::chrono::milliseconds(50);
  backoff_policy backoff{};
  /// Upper bound of the positive random spread added on top of a server's
  /// delay, so that clients told the same instant do not all return at it.
  duration server_delay_spread = std::chrono::milliseconds(100);
  /// Kept back from the end of every planned wait that the deadline limits.
  /// A real timer always fires a little late (scheduling, timer slack); a wait
  /// planned to end exactly when the remaining time equals
  /// min_attempt_allowance would then find less than the minimum and stop as
  /// deadline_exhausted after sleeping. With this slack, an attempt still
  /// starts with at least min_attempt_allowance when the timer fires up to
  /// timer_slack late; later than that, the operation stops as
  /// deadline_exhausted after its sleep (the minimum allowance stays a
  /// promise).
  duration timer_slack = std::chrono::milliseconds(5);
  /// Backup attempts for the slow tail (off by default).
  hedging_policy hedging{};

  /// The largest hedging.max_hedges: at most this many attempts besides the
  /// first run at once.
  static constexpr unsigned max_hedges_cap = 4;

  /// Empty when the policy is usable, otherwise a sentence naming the problem.
  std::optional<std::string> validate() const;
};

} // namespace coretry

#endif
