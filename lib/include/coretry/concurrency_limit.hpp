#ifndef CORETRY_CONCURRENCY_LIMIT_HPP
#define CORETRY_CONCURRENCY_LIMIT_HPP

#include <coretry/limit_model.hpp>
#include <coretry/policy.hpp>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace coretry {

/// What an attempt's end tells a concurrency limit about the dependency.
enum class limit_signal {
  sample,  ///< it ended on its own (answered, or failed without a sign of overload): its latency is a sample
  drop,    ///< a sign of overload: the attempt timed out, or the dependency shed it (503, 429, a refused connection)
  ignored, ///< nothing to learn (cancelled by its caller, superseded by a hedge, never started)
};

/// Somebody waiting for a permit (an operation's attempt that found none
/// free). Intrusive: the waiter's memory is its owner's, and is in the
/// limit's queue only between wait() answering `queued` and either
/// cancel_wait() or a grant.
///
/// A grant happens in two steps. Under the limit's lock, accept_permit()
/// is called: the waiter is out of the queue and may refuse the permit
/// (false: its owner is being destroyed), which then goes to the next
/// waiter or back to the pool. After the lock is released, permit_granted()
/// is called on the waiter that accepted, on the thread that released the
/// permit: it must only hand the event to its owner's executor.
/// accept_permit() runs under the limit's lock: it must not call the limit
/// (try_acquire, lock-free, excepted). A waiter whose wait ended with a
/// grant (cancel_wait answered `granted`) may wait again only after its
/// permit_granted() was called.
class permit_waiter {
public:
  virtual bool accept_permit() noexcept = 0;
  virtual void permit_granted() noexcept = 0;

protected:
  ~permit_waiter() = default;

private:
  friend class concurrency_limit;
  permit_waiter* newer_ = nullptr;
  permit_waiter* older_ = nullptr;
  bool queued_ = false;
  bool granted_ = false; ///< its last wait ended with a permit
};

/// A limit on the attempts in flight to one dependency, shared (like the
/// budget and the gate) by every operation and thread calling it. Every
/// attempt holds a permit from its start until its own operation has
/// completed, cancellation included. Thread-safe; taking and giving back a
/// permit takes no lock while nobody waits, and allocates nothing. Time is an input (a time
/// since the epoch of the clock its callers share): it reads no clock.
///
/// **Adaptive** (the default): the limit moves with what the attempts show,
/// window by window (limit_model: the window's median latency against a
/// baseline, and drops; see lib/docs/overload.md). **Fixed**: `adaptive` off,
/// the limit stays at `initial_limit`.
///
/// **Waiting.** An attempt that finds no permit free may wait, at most
/// `max_wait`, in a queue of at most `max_waiters`; the newest waiter is
/// served first (see lib/docs/overload.md for why). With the queue full, or
/// `max_wait` zero, it is refused at once.
class concurrency_limit {
public:
  struct options {
    bool adaptive = true;
    /// The limit at the start (and, when not adaptive, always).
    unsigned initial_limit = 20;
    /// Adaptive: the limit never goes below this, nor above max_limit.
    unsigned min_limit = 2;
    unsigned max_limit = 1000;
    /// Adaptive: the latency that says "no queue" may be exceeded this many
    /// times before the limit is lowered.
    double tolerance = 2.0;
    /// Adaptive: the factor applied on a window with drops.
    double decrease = 0.9;
    /// Adaptive: the shortest window, and the fewest samples a window needs
    /// to judge the latency.
    duration window = std::chrono::milliseconds(100);
    unsigned min_window_samples = 10;
    /// The longest an attempt waits for a permit, and how many may wait.
    duration max_wait = std::chrono::milliseconds(5);
    unsigned max_waiters = 64;
  };

  /// Counters, for metrics.
  struct counts {
    std::uint64_t acquired = 0; ///< permits taken (at once or after a wait)
    std::uint64_t waited = 0;   ///< attempts that joined the queue
    std::uint64_t refused = 0;  ///< refusals (queue full, or the wait ended without a permit; not a waiter that refused its permit in accept_permit)
  };

  enum class wait_result { acquired, queued, refused };
  enum class cancel_result { removed, granted };

  concurrency_limit() : concurrency_limit(options{}) {}
  /// Throws std::invalid_argument naming the bad option.
  explicit concurrency_limit(options opts);
  concurrency_limit(const concurrency_limit&) = delete;
  concurrency_limit& operator=(const concurrency_limit&) = delete;

  /// Takes a permit if one is free (none while others wait): lock-free.
  bool try_acquire() noexcept;
  /// Takes a permit if one is free, else queues `w` (its wait is the
  /// caller's to bound: cancel_wait when it ends), else refuses (the queue
  /// is full or max_wait is zero; counted as a refusal).
  wait_result wait(permit_waiter& w) noexcept;
  /// Ends `w`'s wait: removed (no permit; counted as a refusal when
  /// `refusal`), or granted (a permit was handed to it, and permit_granted
  /// is called or on its way: the permit is the caller's to give back).
  cancel_result cancel_wait(permit_waiter& w, bool refusal = true) noexcept;
  /// Gives a permit back after its attempt ended at `now`, `latency` after
  /// it started, telling what it showed. A waiting attempt gets the permit.
  void release(duration now, duration latency, limit_signal signal) noexcept;
  /// Counts a refusal made without asking wait() (the caller allowed no
  /// wait, or had no time left for one), so that totals() shows every one.
  void count_refusal() noexcept { refused_.fetch_add(1, std::memory_order_relaxed); }

  /// The limit in force (after a decrease it may be below in_flight:
  /// nothing is revoked, and no permit is handed out until in_flight is
  /// under it), the permits held, and the attempts waiting.
  unsigned limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
  unsigned in_flight() const noexcept { return in_flight_.load(std::memory_order_relaxed); }
  unsigned waiting() const noexcept { return waiting_.load(std::memory_order_relaxed); }
  /// The latency the limit takes as "no queue" (zero until it has one).
  duration baseline() const noexcept;
  counts totals() const noexcept;
  const options& settings() const noexcept { return options_; }

private:
  options options_;
  std::atomic<unsigned> limit_;
  std::atomic<unsigned> in_flight_{0};
  std::atomic<unsigned> waiting_{0};
  std::mutex queue_lock_;
  permit_waiter* newest_ = nullptr;
  permit_waiter* oldest_ = nullptr;
  std::atomic<std::uint64_t> acquired_{0};
  std::atomic<std::uint64_t> waited_{0};
  std::atomic<std::uint64_t> refused_{0};
  // The adaptive rule and its window state (lock-free recording; one
  // thread at a time closes a window).
  limit_model model_;
  bool take_permit() noexcept;
  void serve_waiters() noexcept;
  void unlink(permit_waiter& w) noexcept;
};

} // namespace coretry

#endif
