#ifndef CORETRY_OBSERVER_HPP
#define CORETRY_OBSERVER_HPP

#include <coretry/attempt_record.hpp>
#include <coretry/policy.hpp>
#include <coretry/stop_reason.hpp>
#include <coretry/wait_source.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace coretry {

/// What an observer is told. `operation` is the caller's bounded name for the
/// logical operation (an HTTP route template such as "/books/{id}", never a
/// URL with its query). Times are from the operation's start.
struct attempt_started_event {
  std::string_view operation;
  unsigned attempt;
  duration at;
  duration allowance; ///< the attempt's deadline, from its start
  /// The attempt limit in force (policy::attempt_limit, or the observed
  /// limit), before the clamp to the remaining time that gives `allowance`.
  duration limit{};
  attempt_kind kind = attempt_kind::first;
};
struct attempt_finished_event {
  std::string_view operation;
  const attempt_record& record;
};
struct backoff_event {
  std::string_view operation;
  unsigned next_attempt;
  duration at;
  duration wait;
  wait_source source;
};
/// An attempt that went on after its cancellation was repeated up to the
/// bound (it ignores cancellation): the operation stops repeating it and
/// waits for it without a timer, since completing while it runs could let it
/// touch freed state. Nothing further happens until the attempt ends.
struct stuck_attempt_event {
  std::string_view operation;
  unsigned attempt;
  duration at;
};

/// What became of a hedge.
enum class hedge_result {
  sent,           ///< a hedge was started
  won,            ///< a hedge's success was the operation's result
  refused_budget, ///< due, but the retry budget had no token: not sent
  refused_gate,   ///< due, but the retry gate did not admit it now: not sent
  refused_limit,  ///< due, but the concurrency limit had no spare permit: not sent (a hedge never waits for one)
};

/// Number of hedge results; useful for per-result counters.
inline constexpr std::size_t hedge_result_count = 5;

/// Stable snake_case name of a hedge result ("sent", "won", ...).
std::string_view to_string(hedge_result result) noexcept;

/// A hedge sent, won or refused. `delay`: the hedging delay in force.
struct hedge_event {
  std::string_view operation;
  hedge_result result;
  unsigned attempt; ///< the hedge's number (sent, won), or the number it would have had
  duration at;
  duration delay;
};

/// A wait for a concurrency limit's permit ended: `granted`, or not (the
/// wait's bound passed, or the caller cancelled). `attempt`: the number the
/// attempt has or would have had; `at`: when the wait began.
struct permit_wait_event {
  std::string_view operation;
  unsigned attempt;
  duration at;
  duration waited;
  bool granted;
};

struct stop_event {
  std::string_view operation;
  stop_reason reason;
  unsigned attempts;
  duration at;
  duration total_backoff;
};

/// Receives an operation's events, on the operation's executor. Methods must
/// not throw and should be cheap: they run on the operation's path.
/// Shared observers must be thread-safe.
class retry_observer {
public:
  virtual ~retry_observer() = default;
  virtual void attempt_started(const attempt_started_event&) noexcept {}
  virtual void attempt_finished(const attempt_finished_event&) noexcept {}
  virtual void backoff_scheduled(const backoff_event&) noexcept {}
  virtual void attempt_stuck(const stuck_attempt_event&) noexcept {}
  virtual void hedge(const hedge_event&) noexcept {}
  virtual void permit_waited(const permit_wait_event&) noexcept {}
  virtual void stopped(const stop_event&) noexcept {}
};

/// Ready-made counters: relaxed atomics, cheap enough to leave on.
class retry_counters final : public retry_observer {
public:
  /// Histogram buckets of attempts per operation: 1, 2, ..., 9, and 10 or more.
  static constexpr std::size_t attempt_buckets = 10;

  struct snapshot {
    std::uint64_t operations = 0;
    std::uint64_t attempts = 0;
    std::uint64_t initial_successes = 0; ///< operations whose first attempt succeeded
    std::uint64_t final_successes = 0;
    std::uint64_t cancellations = 0;
    duration total_backoff{};
    std::array<std::uint64_t, attempt_buckets> attempts_per_operation{};
    std::array<std::uint64_t, stop_reason_count> stops{}; ///< indexed by stop_reason
    std::uint64_t hedges_sent = 0, hedges_won = 0, hedges_refused_budget = 0, hedges_refused_gate = 0,
                  hedges_refused_limit = 0;
  };

  void attempt_started(const attempt_started_event& e) noexcept override;
  void attempt_finished(const attempt_finished_event& e) noexcept override;
  void backoff_scheduled(const backoff_event& e) noexcept override;
  void stopped(const stop_event& e) noexcept override;
  void hedge(const hedge_event& e) noexcept override;

  snapshot read() const noexcept;

private:
  using counter = std::atomic<std::uint64_t>;
  counter operations_{0}, attempts_{0}, initial_successes_{0}, final_successes_{0}, cancellations_{0};
  std::atomic<std::int64_t> backoff_ns_{0};
  std::array<counter, attempt_buckets> per_operation_{};
  std::array<counter, stop_reason_count> stops_{};
  std::array<counter, hedge_result_count> hedges_{}; ///< indexed by hedge_result
};

} // namespace coretry

#endif
