#ifndef CORETRY_LATENCY_TRACKER_HPP
#define CORETRY_LATENCY_TRACKER_HPP

#include <coretry/attempt_record.hpp>
#include <coretry/policy.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace coretry {

/// How an attempt ended, as a latency tracker counts it.
enum class latency_result {
  success, ///< answered in time: its latency is a sample
  timeout, ///< abandoned at its limit: a censored sample (the latency was at least that limit)
  failure, ///< ended otherwise (refused, reset, an error status): counted, not a sample
};

/// How the attempt of `record` ended, as a tracker (and the attempt
/// duration metrics) count it: timeout when its deadline expired
/// (attempt_error::timed_out), success when it was classified so, else failure.
latency_result latency_result_of(const attempt_record& record) noexcept;

/// The stable name of a result: "success", "timeout" or "failure".
std::string_view to_string(latency_result result) noexcept;

/// What a latency tracker says about its window for one percentile. The
/// tracker caches it as one 64-bit atomic value.
struct latency_snapshot {
  /// The percentile of the window's successful attempts, read as the upper
  /// edge of its bucket (never below the true value of that rank, at most
  /// latency_tracker::relative_error above it); zero when the window holds
  /// no success.
  duration percentile{};
  /// Successful attempts in the window.
  std::uint64_t successes = 0;
  /// Whether more than half of the window's attempts, and at least
  /// latency_tracker::min_censored_attempts of them, ended at their limit.
  bool censored_majority = false;
  /// The longest limit at which an attempt of the window was abandoned,
  /// read as its bucket's upper edge; zero when none was.
  duration longest_censored{};

  friend bool operator==(const latency_snapshot&, const latency_snapshot&) = default;
};

/// The latencies of recent attempts to one dependency, shared by the
/// operations that call it (as a retry budget is), on any thread.
///
/// **Buckets.** A log-linear histogram over nanoseconds (as HdrHistogram's):
/// exact below 128 ns, then each power of two split into 64 equal buckets,
/// up to 2^40 ns (about 18 minutes; longer samples count as that). A value v
/// is read back as the upper edge u of its bucket: v <= u < v x (1 + 1/64),
/// so every percentile is reported at most 1.6% above the sample of that
/// rank, never below it.
///
/// **Window.** `window` is kept in `sub_windows` sub-windows of window /
/// sub_windows each, which rotate: a sub-window is cleared when the first
/// sample of its new period arrives, and one older than the window is
/// ignored when reading. Time is given by the caller (time since the epoch
/// of the clock all the tracker's callers share), never read inside.
///
/// **Recording** is lock-free and allocation-free: a division, a few bit
/// operations and one relaxed atomic add (a timeout adds a compare-and-swap
/// keeping the sub-window's longest limit). The first sample of a new
/// sub-window period clears that sub-window (2,240 relaxed stores) first; a
/// sample recorded by another thread during those microseconds may be lost,
/// and so may one arriving more than a window late.
///
/// **Reading.** percentile() and compute() scan the window (about 22,000
/// relaxed loads with the defaults: tens of microseconds). snapshot() serves
/// a cached answer instead, one atomic load, recomputed by the first caller
/// that finds it older than `refresh_interval`; up to `cached_percentiles`
/// different percentiles are cached, any other is computed on each call.
class latency_tracker {
public:
  /// The tracker's parameters. Defaults: a 10 s window in 10 sub-windows,
  /// snapshots refreshed every 5 ms.
  struct options {
    /// Span of the window (1 ms to 24 h).
    duration window = std::chrono::seconds(10);
    /// Sub-windows the window rotates in (1 to 60).
    unsigned sub_windows = 10;
    /// A cached snapshot older than this is recomputed when asked for
    /// (0 to the window; 0: every call computes).
    duration refresh_interval = std::chrono::milliseconds(5);
  };

  /// Buckets per power of two above the exact range (2^6).
  static constexpr unsigned sub_buckets = 64;
  /// Every read value u of a sample v: v <= u < v x (1 + relative_error).
  static constexpr double relative_error = 1.0 / sub_buckets;
  /// The longest duration told apart: longer samples count as this.
  static constexpr duration longest = duration((std::int64_t{1} << 40) - 1);
  /// Buckets in one sub-window.
  static constexpr std::size_t bucket_count = 2240;
  /// The censored-majority rule needs at least this many attempts in the window.
  static constexpr std::uint64_t min_censored_attempts = 10;
  /// Different percentiles snapshot() caches.
  static constexpr std::size_t cached_percentiles = 4;

  /// A tracker with the default options.
  latency_tracker() : latency_tracker(options{}) {}
  /// Throws std::invalid_argument naming the bad option.
  explicit latency_tracker(const options& opts);
  ~latency_tracker();
  latency_tracker(const latency_tracker&) = delete;
  latency_tracker& operator=(const latency_tracker&) = delete;

  /// Counts an attempt that ended at `now` as `result`, after `latency`
  /// (for a timeout: the limit it was abandoned at). Negative values count
  /// as zero. Lock-free, allocation-free.
  void record(latency_result result, duration latency, duration now) noexcept;

  /// The `percentile` (in percent, above 0 and at most 100; out of range is
  /// clamped to that) of the successes in the window at `now`, by nearest
  /// rank, read as its bucket's upper edge; zero when there are none.
  /// Scans the window.
  duration percentile(double percentile, duration now) const noexcept;
  /// Successful attempts in the window at `now`. Scans the window.
  std::uint64_t successes(duration now) const noexcept;
  /// The whole snapshot for `percentile` at `now`, computed now (a scan).
  latency_snapshot compute(double percentile, duration now) const noexcept;
  /// The snapshot for `percentile` at `now`: the cached one unless it is
  /// older than refresh_interval (or another thread is refreshing it), else
  /// computed and cached. Lock-free: a caller never waits for another.
  latency_snapshot snapshot(double percentile, duration now) noexcept;

  /// The value a sample of `d` is read back as: its bucket's upper edge.
  static duration upper_edge(duration d) noexcept;
  /// The options in force.
  const options& settings() const noexcept { return options_; }

private:
  struct sub_window;
  struct cache_entry {
    std::atomic<std::uint32_t> key{0};     // percentile in millionths of a percent + 1; 0: free
    std::atomic<std::uint64_t> packed{0};  // the snapshot (pack())
    std::atomic<std::int64_t> computed_at{0};
    std::atomic<bool> computed{false};
    std::atomic<bool> busy{false};
  };
  std::int64_t period_of(duration now) const noexcept;
  cache_entry* entry_for(std::uint32_t key) noexcept;

  options options_;
  duration width_;
  std::atomic<std::int64_t> last_{0}; // the latest period recorded into (<< 6) and its sub-window
  std::unique_ptr<sub_window[]> windows_;
  std::array<cache_entry, cached_percentiles> cache_{};
};

} // namespace coretry

#endif
