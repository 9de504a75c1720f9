#ifndef CORETRY_GATE_HPP
#define CORETRY_GATE_HPP

#include <coretry/policy.hpp>
#include <coretry/random.hpp>
#include <coretry/verdict.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

namespace coretry {

/// What a retry gate answers to an operation that wants to retry.
struct gate_decision {
  /// The three answers.
  enum class action {
    admit, ///< send the retry now
    wait,  ///< sleep until `at` (holding nothing), then ask again with this decision
    deny,  ///< do not retry: the dependency is unhealthy
  };
  /// Which answer.
  action what = action::admit;
  /// wait: the instant to ask again at (the operation's reserved slot), on
  /// the clock the gate's callers share, as time since that clock's epoch.
  duration at{};
  /// wait: the generation of the gate's slots the reservation belongs to
  /// (shared by every holder of that generation; a fall back revokes it),
  /// given back with the next question (0: no slot is held, the retry just
  /// asks again). admit: nonzero when
  /// the retry is a probe the gate wants to hear the end of
  /// (retry_gate::probe_ended).
  std::uint64_t ticket = 0;

  /// Send the retry now.
  static constexpr gate_decision admit() noexcept { return {}; }
  /// Send the retry now, as probe `ticket`: tell probe_ended when it is over.
  static constexpr gate_decision admit_probe(std::uint64_t ticket) noexcept {
    return {action::admit, {}, ticket};
  }
  /// Ask again at `at`, presenting `ticket`.
  static constexpr gate_decision wait_until(duration at, std::uint64_t ticket) noexcept {
    return {action::wait, at, ticket};
  }
  /// Do not retry.
  static constexpr gate_decision deny() noexcept { return {action::deny, {}, 0}; }
};

/// Keeps retries from amplifying an outage of one dependency. Shared by the
/// operations that call that dependency, on any thread: implementations must
/// be thread-safe. Every instant is a time since the epoch of the clock the
/// operations' timers share (all callers of one gate must use one clock).
///
/// The gate registers no waiter: an operation told to wait sleeps on its own
/// timer and asks again. An operation that gives up while waiting leaves
/// nothing behind but an unused slot.
class retry_gate {
public:
  virtual ~retry_gate() = default;
  /// Every attempt's result (first attempts included), when it ended.
  /// `success` and `transient` are health signals; `permanent` counts for
  /// nothing (a rejection says nothing about the dependency's health).
  virtual void record(attempt_status result, duration now) noexcept = 0;
  /// Asked before each retry, at `now`. `latest` is the last instant at
  /// which the retry would still be useful: a slot after it is not reserved
  /// (the answer is then deny). `held` is the previous answer when it was a
  /// wait (the operation comes back for its slot), else null.
  virtual gate_decision ask(duration now, duration latest, const gate_decision* held) noexcept = 0;
  /// A retry admitted with a nonzero ticket (a probe) is over: its result
  /// was recorded, or the operation ended without one (cancelled, failed,
  /// destroyed). Called once per such admission. The default ignores it.
  virtual void probe_ended(std::uint64_t ticket) noexcept { (void)ticket; }
  /// Asked before an operation's first attempt, at `now`: false stops the
  /// operation before it sends anything (dependency_unhealthy). `random` is
  /// the operation's own source, for a gate that rejects with a probability.
  /// The default admits every first attempt.
  virtual bool allow_first_attempt(duration now, random_source& random) {
    (void)now;
    (void)random;
    return true;
  }
};

/// The health and admission rule of a retry gate, without threads: no
/// clock reads (every instant is passed in), no randomness, no allocation.
/// local_gate adds thread safety around it; tests drive it directly.
///
/// **Open** (the initial state): every retry is admitted. The model keeps
/// the results of a recent window: requests (successes + transient
/// failures) and accepts (successes). It judges them with client-side
/// adaptive throttling's rule, p = max(0, (requests - K x accepts) /
/// (requests + 1)): p > 0 means more than 1/K of the requests fail. When at
/// least `min_requests` health signals are in the window and p >
/// `close_above`, the dependency is unhealthy and the gate **closes**. With
/// the defaults (K = 2, close_above = 0.2) that takes more than about 60%
/// failures: a dependency failing half the time keeps the gate open.
///
/// **Closed** (level 0): retries pass only as probes, one slot per
/// `probe_interval`, and one at a time: while a probe admitted at level 0 is
/// out (not yet ended, for less than `probe_timeout`) no other is admitted,
/// so a dependency that answers slowly sees fewer probes, not more in flight
/// (after a fall back, retries admitted at the faster level may still be out
/// when the first new probe goes). A retry asking for a slot gets the next
/// free one: at
/// once if it is free now, else a wait until it (each held retry its own
/// slot, so they never wake together), or deny when that slot is after the
/// retry's `latest` instant or more than `max_hold` away. A slot is promised
/// at most `slots_ahead` slot intervals ahead (1: the next slot only): a
/// retry whose slot would be later is told
/// to ask again after between one and two `recheck_interval` (spread by a
/// fixed low-discrepancy sequence, so that the held retries do not come back
/// together), by which time the rate may have grown. Only a retry that could
/// not come back before its `latest` instant, or whose `max_hold` is
/// shorter than a recheck, reserves a slot further ahead (up to `max_hold`).
/// So a gate holding many retries never promises slots at the probe rate far
/// into a future in which it will admit faster, and when it opens, the held
/// retries come back spread over `2 x recheck_interval`.
///
/// **Slow start.** Results keep arriving (from probes and from first
/// attempts, which the gate never holds). At each level the gate counts
/// successes and failures; after `step_successes` successes while the
/// level's p <= close_above it goes up one level and the slot interval
/// halves; after `fallback_failures` failures while p > close_above it falls back to
/// level 0 and the slots already handed out are revoked (their holders are
/// given new slots at the probe rate when they come back). Going up from
/// level `slow_start_steps` opens the gate and forgets the outage (the
/// window starts empty).
class gate_model {
public:
  /// The model's parameters. Defaults: a 10 s window judged from 100
  /// results, K = 2 with p above 0.2, one probe per 100 ms, 2 successes per
  /// doubling and 4 failures to fall back, 6 doublings (down to one slot per
  /// 1.5625 ms) before the gate opens, retries further than a slot ahead
  /// asking again every 100 to 200 ms, waits of at most 10 s.
  struct options {
    /// Span of the health window (kept in 10 buckets of window / 10 each).
    duration window = std::chrono::seconds(10);
    /// Health signals needed in the window before it may be judged
    /// unhealthy. Few results are noisy: from 10, a dependency failing half
    /// the time shows 7 failures in 10 about one time in six.
    unsigned min_requests = 100;
    /// K of the rule p = max(0, (requests - K x accepts) / (requests + 1)). At least 1.
    double k = 2.0;
    /// Unhealthy when p is above this (between 0 and 1).
    double close_above = 0.2;
    /// While closed, one retry per this interval.
    duration probe_interval = std::chrono::milliseconds(100);
    /// While closed, a probe holds back the next one until it ends or for
    /// this long, whichever comes first.
    duration probe_timeout = std::chrono::seconds(1);
    /// Successes at one level needed to double the rate.
    unsigned step_successes = 2;
    /// Failures at one level that, with p above close_above, fall back to probes.
    unsigned fallback_failures = 4;
    /// Doublings of the probe rate before the gate opens again.
    unsigned slow_start_steps = 6;
    /// The longest wait the gate hands out; a later slot is a deny.
    duration max_hold = std::chrono::seconds(10);
    /// Slots are promised at most this many slot intervals ahead.
    unsigned slots_ahead = 1;
    /// A retry whose slot is further ahead asks again after between one and
    /// two of these.
    duration recheck_interval = std::chrono::milliseconds(100);
    /// Also throttle first attempts, after client-side adaptive throttling:
    /// once the window holds min_requests results, a first attempt is
    /// rejected with probability p (the window's failure pressure; rejected
    /// first attempts are not counted as requests, unlike that rule). The
    /// draw comes from the operation's random source on the thread that
    /// starts the operation: share a source between threads only if it is
    /// thread-safe. Off by
    /// default: first attempts are the callers' own load, and rejecting them
    /// turns a partial outage into failures the dependency never saw.
    bool throttle_first_attempts = false;
  };

  /// Where the gate stands.
  enum class state {
    open,       ///< every retry admitted
    recovering, ///< retries admitted only in slots
  };

  /// Throws std::invalid_argument naming the bad option.
  explicit gate_model(const options& opts);

  /// Counts `result` at `now`; may close the gate, step the slow start or open it.
  void record(attempt_status result, duration now) noexcept;
  /// Answers a retry at `now` (see retry_gate::ask).
  gate_decision ask(duration now, duration latest, const gate_decision* held) noexcept;
  /// A probe admitted with `ticket` is over (see retry_gate::probe_ended).
  void probe_ended(std::uint64_t ticket) noexcept;

  /// The current state.
  state current() const noexcept { return state_; }
  /// Closes the gate at `now` if it is open and judged_counts says
  /// unhealthy (after set_fleet brought the peers' failures). Not thread-safe.
  void reconsider(duration now) noexcept;
  /// While recovering, counts `successes` and `failures` the other members
  /// of the fleet had since the last call towards the slow start, as this
  /// gate's own results count: the fleet climbs (or falls back) together,
  /// on the fleet's results, not each member on its share of them. At most
  /// one level up or one fall back per call. Not thread-safe.
  void step_on_peers(std::uint64_t successes, std::uint64_t failures, duration now) noexcept;
  /// The slow-start level while recovering (0: probes only).
  unsigned level() const noexcept { return level_; }
  /// The interval between slots at the current level.
  duration slot_interval() const noexcept;
  /// Health signals and successes in the window at `now`.
  struct counts {
    std::uint64_t requests = 0; ///< successes plus transient failures
    std::uint64_t accepts = 0;  ///< successes
  };
  /// The window's counts at `now`: this gate's own results only.
  counts window_counts(duration now) const noexcept;
  /// What health is judged on at `now`: the window's counts plus the other
  /// processes' (set_fleet). Without a fleet, the window's counts.
  counts judged_counts(duration now) const noexcept;

  /// Shares the gate with a fleet of `processes` processes (at least 1)
  /// whose other members had `peers` results in the window: health is
  /// judged on the fleet's results, and every slot interval is multiplied
  /// by `processes`, so that the fleet, each member at one level, lets
  /// through what one gate would. set_fleet({}, 1) is a gate on its own
  /// again. Lock-free; the slot interval changes from the next slot handed
  /// out. Peer counts above 2^32 - 1 are taken as 2^32 - 1. `phase`, in
  /// [0, 1), places this member's first slot after the gate closes at
  /// `phase` slot intervals, so that the members of a fleet, which close
  /// together, do not all send a probe at once (a member on its own: 0).
  void set_fleet(const counts& peers, unsigned processes, double phase = 0.0) noexcept;
  /// The other processes' results last set (set_fleet).
  counts peers() const noexcept;
  /// The fleet's size last set (set_fleet); 1 on its own.
  unsigned processes() const noexcept { return processes_.load(std::memory_order_relaxed); }
  /// How many times the gate has opened after an outage. When it opens, the
  /// peers' counts are forgotten with the window's: a fleet member that sees
  /// this number change tells the fleet to forget the outage too.
  std::uint64_t openings() const noexcept { return openings_.load(std::memory_order_relaxed); }
  /// p = max(0, (requests - K x accepts) / (requests + 1)) for `c`.
  double failure_pressure(const counts& c) const noexcept;
  /// Whether `c` says unhealthy: at least min_requests and p > close_above.
  bool unhealthy(const counts& c) const noexcept;
  /// The probability with which a first attempt is rejected at `now`: 0
  /// unless throttle_first_attempts is set and the window holds at least
  /// min_requests results, else the window's p. Lock-free.
  double first_attempt_rejection(duration now) const noexcept;
  /// The options in force.
  const options& settings() const noexcept { return options_; }
  /// The window is kept in this many buckets of window / buckets each (a
  /// fleet sharing the gate keeps its counts the same way).
  static constexpr std::size_t buckets = 10;

private:
  friend class local_gate;
  // The window is lock-free (packed atomic buckets), so that local_gate can
  // count results and judge health without its mutex while the gate is open.
  void count(attempt_status result, duration now) noexcept; // the window only: lock-free
  void react(attempt_status result, duration now) noexcept; // the state: not thread-safe
  void close(duration now) noexcept;
  void step(attempt_status result, duration now) noexcept;
  void judge_step(duration now) noexcept;
  std::int64_t bucket_of(duration now) const noexcept;

  options options_;
  duration bucket_width_;
  std::array<std::atomic<std::uint64_t>, buckets> window_{};
  // The fleet (set_fleet): peers' requests (high 32 bits) and accepts (low).
  std::atomic<std::uint64_t> peers_{0};
  std::atomic<unsigned> processes_{1};
  std::atomic<std::uint32_t> phase_{0}; ///< set_fleet's phase, in 2^-32 of a slot interval
  std::atomic<std::uint64_t> openings_{0};
  // Recovery state: guarded by local_gate's mutex.
  state state_ = state::open;
  unsigned level_ = 0;
  unsigned step_accepts_ = 0;
  unsigned step_failures_ = 0;
  duration next_slot_{};
  std::uint64_t generation_ = 1; ///< tickets of an earlier generation are revoked
  std::uint32_t spread_ = 0;     ///< position in the sequence that spreads re-asks
  std::uint64_t probes_ = 0;     ///< tickets handed to probes so far
  std::uint64_t probe_out_ = 0;  ///< the probe out at level 0 (its ticket), or 0
  duration probe_out_since_{};
  gate_decision recheck(duration now, duration latest) noexcept;
  gate_decision admit_probe(duration now) noexcept;
};

/// A retry gate for one process: a gate_model made thread-safe. While the
/// gate is open, recording a result and asking for a retry take no lock and
/// allocate nothing: recording a success is one compare-and-swap on a window
/// bucket and one load of the state; recording a failure and asking also
/// read the ten buckets (relaxed loads) to judge the window, and an answer
/// bumps one relaxed counter. The mutex is taken only while the gate is
/// closed or recovering, or when a failure may close it.
class local_gate final : public retry_gate {
public:
  /// The model's options.
  using options = gate_model::options;

  /// A gate with the default options.
  local_gate() : local_gate(options{}) {}
  /// Throws std::invalid_argument naming the bad option.
  explicit local_gate(const options& opts) : model_(opts) {}

  /// See retry_gate::record. Lock-free while the gate is open and the result
  /// cannot close it.
  void record(attempt_status result, duration now) noexcept override;
  /// See retry_gate::ask. Lock-free while the gate is open and healthy.
  gate_decision ask(duration now, duration latest, const gate_decision* held) noexcept override;
  /// See retry_gate::allow_first_attempt and options::throttle_first_attempts.
  /// Lock-free; draws from `random` only when the rejection probability is
  /// above zero.
  bool allow_first_attempt(duration now, random_source& random) override;
  /// See retry_gate::probe_ended. Takes the mutex (probes only come while
  /// the gate is not open).
  void probe_ended(std::uint64_t ticket) noexcept override;

  /// Whether every retry is admitted now, for metrics.
  bool is_open() const noexcept { return open_.load(std::memory_order_acquire); }
  /// How many answers of each kind the gate gave, since it was made.
  struct answers {
    std::uint64_t admitted = 0; ///< retries admitted, open or in a slot
    std::uint64_t probes = 0;   ///< of those, admitted while the gate was not open
    std::uint64_t held = 0;     ///< wait answers
    std::uint64_t denied = 0;   ///< deny answers
    std::uint64_t throttled = 0; ///< first attempts rejected (throttle_first_attempts)
  };
  /// The answers so far, for metrics (each count read on its own, relaxed).
  answers counts() const noexcept;
  /// The slow-start level while recovering, for metrics.
  unsigned level() const;

  /// Shares the gate with a fleet (see gate_model::set_fleet), at `now`:
  /// closes it if the fleet's results say unhealthy, and while it recovers
  /// counts what the peers' counts grew by since the last call towards the
  /// slow start (gate_model::step_on_peers).
  void set_fleet(const gate_model::counts& peers, unsigned processes, duration now, double phase = 0.0) noexcept;
  /// Health signals this gate has recorded since it was made (successes plus
  /// transient failures, and successes), for a fleet member to publish.
  gate_model::counts recorded() const noexcept {
    return {recorded_requests_.load(std::memory_order_relaxed), recorded_accepts_.load(std::memory_order_relaxed)};
  }
  /// See gate_model::openings.
  std::uint64_t openings() const noexcept { return model_.openings(); }
  /// The options in force.
  const options& settings() const noexcept { return model_.settings(); }
  /// See gate_model::processes.
  unsigned processes() const noexcept { return model_.processes(); }

private:
  gate_decision counted(gate_decision d, bool probe) noexcept;
  gate_model model_;
  std::atomic<bool> open_{true};
  std::atomic<std::uint64_t> admitted_{0}, probes_{0}, held_{0}, denied_{0}, throttled_{0};
  std::atomic<std::uint64_t> recorded_requests_{0}, recorded_accepts_{0};
  mutable std::mutex mutex_;
};

} // namespace coretry

#endif
