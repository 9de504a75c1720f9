#ifndef CORETRY_LIMIT_MODEL_HPP
#define CORETRY_LIMIT_MODEL_HPP

#include <coretry/policy.hpp>

#include <array>
#include <atomic>
#include <cstdint>

namespace coretry {

/// The adaptive rule of a concurrency limit (see lib/docs/overload.md),
/// without permits or waiters: every instant is passed in, nothing is read
/// from a clock, nothing is drawn at random, nothing is allocated.
/// concurrency_limit keeps one and calls it from every thread; tests may
/// drive it directly.
///
/// **Recording** (record, saw_in_flight) is lock-free: a sample is one
/// relaxed add on a bucket of the current window's log-scaled histogram (8
/// buckets per power of two, from 1 us to 2^40 ns: a latency is read back
/// within 1/16 of its value), a drop one add on the window's drop count.
///
/// **Closing a window.** The first window opens at the first end seen. A
/// window closes at the first call of close_window at or after its deadline
/// (`window` after it opened) once it holds at least `min_window_samples`
/// ends (samples and drops); until then it stays open. concurrency_limit
/// calls it on every end before recording that end, which then counts in
/// the next window. Exactly one caller closes it: the one whose
/// compare-and-swap takes the deadline. It empties the buckets one by one, so a sample recorded
/// while it does may count in the closed window or in the next one (a
/// sample in the wrong window, at most a handful per window, is accepted).
///
/// **The rule**, per closed window (judge):
/// - drops in at least 1% of its ends (and at least one): limit x `decrease`;
/// - else, with a baseline, when the window's median latency is above
///   `tolerance` x baseline: limit x max(0.5, baseline / median) (a standing
///   queue: cut to about the concurrency the dependency serves without one,
///   so that the queue drains and the next windows show the baseline again);
/// - else, when the window's peak in-flight reached half the limit (it was
///   used): limit + max(1, sqrt(limit) / 2); an unused limit does not grow.
/// The limit is clamped to [min_limit, max_limit].
///
/// **The baseline** is the lowest window median of the last 32 judged
/// windows (kept as 8 slots of 4 windows each): one lucky sample moves no
/// median, and a dependency that became slower for good is learnt once its
/// faster windows are 32 windows old. While the limit sits at `min_limit`
/// and the latency is still too high for 4 windows in a row, the queue is
/// not this limit's to drain: the baseline is taken from the window at once.
class limit_model {
public:
  /// The rule's parameters (concurrency_limit::options, adaptive part).
  struct options {
    double initial_limit = 20;
    double min_limit = 2;
    double max_limit = 1000;
    double tolerance = 2.0;
    double decrease = 0.9;
    duration window = std::chrono::milliseconds(100);
    unsigned min_window_samples = 10;
  };

  /// What one closed window showed.
  struct window_summary {
    std::uint64_t samples = 0;  ///< latency samples
    std::uint64_t drops = 0;    ///< drop signals
    duration median{};          ///< the samples' median (zero without samples)
    unsigned peak_in_flight = 0; ///< the most permits held at once
  };

  /// What close_window did.
  enum class verdict { none, increased, decreased_latency, decreased_drops, held };

  /// Options are not checked here (concurrency_limit checks them).
  explicit limit_model(const options& opts) noexcept;

  /// Records an attempt's end at `now`: a latency sample, or a drop.
  void record(duration latency, bool drop) noexcept;
  /// `n` permits are held now (after a take): kept as the window's peak.
  void saw_in_flight(unsigned n) noexcept;
  /// Closes the window if it is due at `now` and this caller wins it.
  /// Returns what was judged (none: nothing closed). Lock-free.
  verdict close_window(duration now, unsigned in_flight) noexcept;

  /// The rule alone: the limit after a window that showed `w`. Not
  /// thread-safe (close_window calls it for the one closing caller).
  verdict judge(const window_summary& w) noexcept;

  /// The limit in force (rounded down), and the latency taken as "no queue".
  unsigned limit() const noexcept { return published_.load(std::memory_order_relaxed); }
  duration baseline() const noexcept { return duration(baseline_ns_.load(std::memory_order_relaxed)); }
  /// The exact (fractional) limit; not thread-safe.
  double exact_limit() const noexcept { return limit_; }

  /// The histogram's shape (8 buckets per power of two from 2^10 ns).
  static constexpr unsigned sub_buckets = 8;
  static constexpr unsigned lowest_power = 10;
  static constexpr unsigned highest_power = 40;
  static constexpr unsigned bucket_count = (highest_power - lowest_power) * sub_buckets;
  /// The bucket a latency counts in, and the latency a bucket is read as.
  static unsigned bucket_of(duration latency) noexcept;
  static duration value_of(unsigned bucket) noexcept;
  /// Baseline memory: slots of windows.
  static constexpr unsigned baseline_slots = 8;
  static constexpr unsigned windows_per_slot = 4;
  static constexpr unsigned stuck_windows = 4;

private:
  options options_;
  // Lock-free window state.
  std::array<std::atomic<std::uint32_t>, bucket_count> buckets_{};
  std::atomic<std::uint32_t> drops_{0};
  std::atomic<unsigned> peak_{0};
  std::atomic<std::int64_t> deadline_{0}; ///< ns; 0: no window yet; `closing` while a caller closes
  static constexpr std::int64_t closing = INT64_MAX;
  std::atomic<unsigned> published_;
  std::atomic<std::int64_t> baseline_ns_{0};
  // The rule's state: only the caller that closes a window touches it (the
  // deadline's compare-and-swap and release store order the closers).
  double limit_;
  std::array<std::int64_t, baseline_slots> slot_min_{}; ///< 0: empty
  unsigned slot_ = 0;
  unsigned in_slot_ = 0;
  unsigned stuck_ = 0;
  void remember(duration median) noexcept;
  void publish() noexcept;
};

} // namespace coretry

#endif
