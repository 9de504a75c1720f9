#ifndef CORETRY_DECISION_CORE_HPP
#define CORETRY_DECISION_CORE_HPP

#include <coretry/budget.hpp>
#include <coretry/concurrency_limit.hpp>
#include <coretry/gate.hpp>
#include <coretry/latency_tracker.hpp>
#include <coretry/policy.hpp>
#include <coretry/random.hpp>
#include <coretry/stop_reason.hpp>
#include <coretry/verdict.hpp>
#include <coretry/wait_source.hpp>

#include <cstdint>
#include <optional>
#include <utility>

namespace coretry {

namespace detail {
template <class Timer, class Factory, class Classifier, class T, class Handler>
class retry_op;
} // namespace detail

/// One step the asynchronous layer must carry out.
struct decision {
  /// wait_permit: the concurrency limit has no permit free now; wait for
  /// one at most `wait` (concurrency_limit::wait), then tell the core
  /// permit_granted() or permit_refused().
  /// wind_down: send the attempts still running terminal cancellation.
  /// After an attempt's end decided the operation, it stops with `reason`
  /// once the last has ended (stopping()); after the caller's cancellation,
  /// as the first of them to end decides (one that succeeds stands).
  /// hedge: an attempt failed while others still run: the next hedge is
  /// due now (ask next_hedge()).
  /// none: nothing to do until the attempts still running end.
  enum class action { start_attempt, sleep, stop, wait_permit, wind_down, hedge, none };
  action what = action::stop;
  duration allowance{};              ///< start_attempt: the attempt's deadline, from now
  duration wait{};                   ///< sleep: how long
  wait_source source = wait_source::none; ///< sleep: why that long
  stop_reason reason = stop_reason::succeeded; ///< stop, wind_down: why
  /// start_attempt: the gate's probe ticket the attempt carries (0: none),
  /// handed back in its attempt_end.
  std::uint64_t probe = 0;

  static decision start_attempt(duration allowance) noexcept { return {action::start_attempt, allowance}; }
  static decision sleep(duration wait, wait_source source) noexcept {
    return {action::sleep, {}, wait, source};
  }
  static decision stop(stop_reason reason) noexcept {
    return {action::stop, {}, {}, wait_source::none, reason};
  }
  static decision wait_permit(duration wait) noexcept { return {action::wait_permit, {}, wait}; }
  static decision wind_down(stop_reason reason) noexcept {
    return {action::wind_down, {}, {}, wait_source::none, reason};
  }
  static decision hedge() noexcept { return {action::hedge}; }
  static decision none() noexcept { return {action::none}; }
};

/// What an attempt's end tells the concurrency limit: nothing when it was
/// `abandoned` (cancelled by the caller, or superseded by another attempt's
/// result) or `cut_short` (it timed out at the operation's overall deadline,
/// before its own limit); a drop when it timed out or its verdict says
/// overload; its latency when the dependency answered (a success, or a
/// failure delivered as an answer); nothing otherwise (a failure that says
/// nothing of the dependency's latency: a name that did not resolve, a
/// certificate refused, a connection found closed).
limit_signal limit_signal_of(const verdict& v, bool timed_out, bool abandoned, bool cut_short = false) noexcept;

/// An attempt's end, as the asynchronous layer saw it (attempt_finished,
/// attempt_abandoned, attempt_threw).
struct attempt_end {
  duration elapsed{};          ///< when it ended, from the operation's start
  duration started{};          ///< when it started, from the operation's start
  duration allowance{};        ///< the allowance it started with
  std::uint64_t probe = 0;     ///< the probe ticket its start carried (decision::probe, hedge_decision::probe)
  unsigned still_running = 0;  ///< the operation's other attempts not ended yet
  bool timed_out = false;      ///< its own deadline ended it
  bool caller_cancelled = false; ///< the caller had asked to cancel by then (told or not with caller_cancelled)
  /// The classifier's verdict; attempt_finished replaces it with what the
  /// attempt counts as (a failure the caller's cancellation ended: permanent,
  /// "cancelled", delivery unknown).
  verdict classified;
  /// Set by attempt_finished: the caller's cancellation ended the attempt;
  /// it says nothing of the dependency (no latency sample, no gate result).
  bool abandoned = false;
};

/// What to do about a hedge (policy::hedging): a backup attempt sent while
/// others are still running.
struct hedge_decision {
  enum class action {
    send,           ///< start a hedge now with `allowance` (its token is paid, the gate admitted it)
    wait,           ///< none before `at` (elapsed since the start): ask again then
    none,           ///< none: hedging off, none left, no room in flight, or too little time
    refused_budget, ///< due, but the budget has no token: not sent
    refused_gate,   ///< due, but the gate does not admit it now: not sent
    refused_limit,  ///< due, but the concurrency limit has no spare permit: not sent
  };
  action what = action::none;
  duration allowance{}; ///< send: the hedge's deadline, from now
  duration at{};        ///< wait: the instant to ask again, from the operation's start
  std::uint64_t probe = 0; ///< send: a probe ticket the gate wants back when the hedge ends (attempt_end::probe)
};

/// The backoff window for retry `retry_index` (0 is the first retry):
/// min(max_window, initial_window x multiplier^retry_index).
duration backoff_window(const backoff_policy& backoff, unsigned retry_index) noexcept;

/// The limit `o` gives an attempt when its tracker's window says `s`
/// (before the clamp to the remaining time): the ceiling until `s` holds
/// o.warm_up successes; else margin x s.percentile, at least twice
/// s.longest_censored when s.censored_majority, clamped to [floor, ceiling].
duration observed_attempt_limit(const observed_limit& o, const latency_snapshot& s) noexcept;

/// The hedge delay a tracker's snapshot `s` for h.delay_percentile gives:
/// the percentile (its bucket's upper edge) clamped to [1 ms, max(1 ms,
/// attempt_limit)]; empty while the window holds fewer than h.min_successes
/// successes (or there is no snapshot): no hedge on a delay yet.
std::optional<duration> observed_hedge_delay(const hedging_policy& h, const latency_snapshot* s,
                                             duration attempt_limit) noexcept;

/// The pure decision core of one logical operation: no I/O, no clock reads,
/// no global randomness. Time is an input (elapsed since the operation
/// started, on whatever monotonic clock the caller uses), randomness comes from
/// the injected source, the budget and the gate are the injected shared ones.
/// The gate is told every attempt's result and asked before every retry,
/// with instants `origin + elapsed` (origin: the operation's start on the
/// clock the gate's callers share, given to begin()).
///
/// Protocol: events in, the next step out. begin() once; an attempt's end is
/// attempt_finished(), or attempt_abandoned() once the operation is
/// stopping(), or attempt_threw() when user code threw; after a sleep,
/// sleep_finished(); after wait_permit, permit_granted() or permit_refused();
/// the caller's cancellation, caller_cancelled(); when a hedge may be due,
/// next_hedge(). Each answers what to carry out; the rules they share are
/// the core's own (private), so each rule is in one place. The permits and
/// probe tickets an attempt holds go back through its end's event. Once a
/// stop is answered the operation is over.
class decision_core {
public:
  /// What a policy with hedging or an observed attempt limit needs beyond
  /// the rest (the parts of the policy and the hedging state): kept apart,
  /// so that a core whose policy has neither does not carry it.
  struct extension {
    hedging_policy hedging;
    std::optional<observed_limit> observed;
    duration hedge_delay{}; ///< the hedging delay in force
    duration hedge_hold{};  ///< no hedge before this (a server's delay), from the start
  };
  /// Whether a core with policy `p` needs an extension.
  static bool needs_extension(const coretry::policy& p) noexcept {
    return p.hedging.max_hedges > 0 || p.observed.has_value();
  }

  /// Throws std::invalid_argument naming the problem when `p` does not
  /// validate. A policy that needs_extension() keeps it in `storage` when
  /// given (unused memory, which the caller keeps until the core is
  /// destroyed, and where the core constructs and destroys it), else in
  /// memory the core allocates.
  decision_core(const coretry::policy& p, random_source& random, retry_budget* budget = nullptr,
                retry_gate* gate = nullptr, concurrency_limit* limit = nullptr, void* storage = nullptr);
  /// Tells the gate that a probe it admitted is over, if one still is.
  ~decision_core();
  decision_core(const decision_core&) = delete;
  decision_core& operator=(const decision_core&) = delete;

  /// The first attempt (records the initial request in the budget), unless
  /// the gate rejects it (retry_gate::allow_first_attempt): then a stop,
  /// dependency_unhealthy, with no attempt made. With a concurrency limit,
  /// the gate is asked first, then a permit taken, then the budget told:
  /// with no permit free the answer is wait_permit (or a stop,
  /// concurrency_limited, when the limit lets no attempt wait).
  /// `origin` is the operation's start as the gate sees time (time since the
  /// epoch of the clock shared by the gate's callers); unused without a gate.
  /// `observed` is the latency tracker's snapshot now, for a policy with an
  /// observed limit (none: the limit is the ceiling, as in the warm-up).
  decision begin(duration origin = duration::zero(), const latency_snapshot* observed = nullptr);
  /// An attempt ended: gives back its probe ticket and its permit (telling
  /// the limit limit_signal_of its verdict), tells the gate its result
  /// (every attempt, the first included) and answers the next step. A
  /// failure after the caller's cancellation (e.caller_cancelled, or told
  /// with caller_cancelled) counts as cancelled (e.classified is replaced,
  /// e.abandoned set, nothing told to the gate): a stop, cancelled, or with
  /// others still running none, and the stop once the last has ended. One
  /// rule set otherwise, whether others run or not: success, a permanent
  /// failure and a transient failure that may not be repeated stop the
  /// operation (with others running: wind_down, and the stop once they
  /// have ended). A transient failure otherwise: with others running, the
  /// next hedge at once (hedge); else a retry after the backoff (sleep), or
  /// a stop when none is possible: budget_exhausted, rather than sleeping,
  /// when the budget has no token for the retry now. `safety` says whether
  /// the operation as a whole may be repeated.
  decision attempt_finished(attempt_end& e, repeat_safety safety);
  /// An attempt that ended once the operation was stopping() (a hedge that
  /// lost, one wound down), or that never ended (its operation destroyed
  /// unrun): its probe ticket and permit go back, the limit and the gate are
  /// told nothing. The stop decided, once it was the last; else none.
  decision attempt_abandoned(const attempt_end& e);
  /// User code threw for an attempt (its factory, before it started, or
  /// its operation or classifier): its probe ticket and permit go back,
  /// the limit and the gate are told nothing, and the operation is over
  /// (the layer delivers the exception): wind_down with others running
  /// (stopping() rejected), else a stop, rejected.
  decision attempt_threw(const attempt_end& e);
  /// The caller cancelled at `elapsed`, with `running` attempts whose end
  /// has not been told. While a permit is awaited: none, and the wait's
  /// end (permit_granted or permit_refused) answers the stop. With
  /// attempts running: wind_down (with the stop already decided, else
  /// cancelled, and attempt_finished decides as the first of them ends).
  /// Else a stop, cancelled (none once stopping()): a permit and a probe
  /// ticket the core held for an attempt not started yet go back.
  decision caller_cancelled(duration elapsed, unsigned running);
  /// Whether the caller's cancellation has been told.
  bool cancelled() const noexcept { return cancelled_; }
  /// Decided while attempts were still running (wind_down): the reason the
  /// operation stops with once the last has ended; nothing new is started
  /// meanwhile.
  std::optional<stop_reason> stopping() const noexcept { return stopping_; }
  /// A sleep finished: re-checks the remaining time, asks the gate, and takes
  /// a budget token. The gate's wait_until(T) becomes a sleep until T
  /// (wait_source::gate), after which this is called again; its deny, or a T
  /// after the last instant at which an attempt could still get the minimum
  /// allowance (less timer_slack), stops with dependency_unhealthy.
  /// `observed`: as for begin().
  /// With a concurrency limit, the permit is taken after the gate admitted
  /// the retry and before the budget's token: wait_permit when none is free.
  decision sleep_finished(duration elapsed, const latency_snapshot* observed = nullptr);

  /// After wait_permit: a permit was granted at `elapsed` (the core holds
  /// it for the attempt). Checks the remaining time and the budget again,
  /// as begin() or sleep_finished() would have; a stop gives the permit back
  /// (cancelled, when the caller has cancelled meanwhile).
  decision permit_granted(duration elapsed, const latency_snapshot* observed = nullptr);
  /// After wait_permit: no permit came (the queue was full, or the wait
  /// ended). A stop, concurrency_limited (cancelled, when the caller has
  /// cancelled meanwhile); a probe the gate admitted is given back; nothing
  /// else is told (no budget deposit or token, no gate result).
  decision permit_refused();
  /// wait_permit was answered, and neither permit_granted() nor
  /// permit_refused() told since: the operation is in the limit's queue (or
  /// a permit is on its way to it).
  bool waiting_for_permit() const noexcept { return permit_for_ != awaiting::nothing; }
  /// The attempt the core answered start_attempt (or a hedge's send) for is
  /// running: its permit is now its own, given back by its end's event.
  /// Until then the core holds it, and gives it back when the attempt is
  /// never started (attempt_threw, caller_cancelled, or the core's
  /// destruction).
  void attempt_started() noexcept { permit_held_ = false; }

  /// Hedging. The next hedge at `elapsed`, with `in_flight` attempts
  /// running: due `hedging.delay` after the latest attempt started, or at
  /// once after attempt_finished answered hedge (an attempt failed
  /// transiently while others run, until a hedge is sent or refused); never
  /// before a server's delay has passed (hedge_hold()). None once the
  /// operation is stopping() or the caller has cancelled.
  /// With hedging.delay_percentile the delay is observed_hedge_delay() of
  /// `hedge_observed` (the tracker's snapshot for that percentile) and the
  /// latest attempt's limit, and nothing is due on a delay while it is empty.
  /// Within max_hedges in flight and max_attempts in all, with at least the
  /// minimum allowance; then, exactly as for a retry, the budget must have a
  /// token and the gate must admit it now (a gate that would only admit it
  /// later refuses it: a hedge is never held). On `send` the token is taken
  /// and the attempt counted.
  hedge_decision next_hedge(duration elapsed, unsigned in_flight, const latency_snapshot* observed = nullptr,
                            const latency_snapshot* hedge_observed = nullptr);
  /// The concurrency limit, or null.
  concurrency_limit* limit() const noexcept { return permits_; }

  /// The hedging delay in force: the policy's fixed delay, or with
  /// hedging.delay_percentile the latest one next_hedge observed (zero before any).
  duration hedge_delay() const noexcept { return ext_ ? ext_->hedge_delay : duration::zero(); }
  /// No hedge is sent before this instant (from the start): the latest a
  /// server's delay reached.
  duration hedge_hold() const noexcept { return ext_ ? ext_->hedge_hold : duration::zero(); }

  /// Attempts started so far.
  unsigned attempts() const noexcept { return attempts_; }
  /// The limit of the latest attempt started, before the clamp to the
  /// remaining time: attempt_limit, or the observed limit.
  duration attempt_limit() const noexcept { return limit_; }
  /// The policy's overall deadline.
  duration overall_deadline() const noexcept { return overall_deadline_; }
  /// The policy's hedging (max_hedges 0: none).
  unsigned max_hedges() const noexcept { return ext_ ? ext_->hedging.max_hedges : 0; }
  /// The percentile the hedging delay is taken from, if any.
  std::optional<double> hedge_delay_percentile() const noexcept {
    return ext_ ? ext_->hedging.delay_percentile : std::nullopt;
  }
  /// The percentile an observed attempt limit is taken from, if any.
  std::optional<double> observed_percentile() const noexcept {
    return ext_ && ext_->observed ? std::optional<double>(ext_->observed->percentile) : std::nullopt;
  }
  /// The operation's start as the gate sees time (given to begin()).
  duration origin() const noexcept { return origin_; }

private:
  // async_retry's operation: retry_setup_problem checked its policy before
  // the operation was started, so its core does not check it again.
  template <class, class, class, class, class>
  friend class detail::retry_op;
  struct checked_policy {};
  decision_core(checked_policy, const coretry::policy& p, random_source& random, retry_budget* budget,
                retry_gate* gate, concurrency_limit* limit, void* storage);

  /// The stop an attempt's verdict decides by itself, if any.
  static std::optional<stop_reason> verdict_stop(const verdict& v, repeat_safety safety) noexcept;
  /// The retry after a transient failure of the last attempt running.
  decision plan_retry(duration elapsed, const verdict& v);
  /// next_hedge's rules.
  hedge_decision hedge_due(duration elapsed, unsigned in_flight, const latency_snapshot* observed,
                           const latency_snapshot* hedge_observed);
  duration local_backoff(unsigned retry_index);
  /// Time left for an attempt's allowance at `elapsed`: deadline - elapsed -
  /// reserve, saturating (duration::max() when there is no overall deadline).
  duration usable_after(duration elapsed) const noexcept;
  decision start_if_useful(duration elapsed, const latency_snapshot* observed);
  /// Gives back the probe ticket and the permit of the attempt that ended
  /// with `e` (its permit telling the limit `signal`; one never started
  /// gives back the permit the core held).
  void give_back(const attempt_end& e, limit_signal signal) noexcept;
  /// The gate's answer for a retry at `elapsed`: start (nothing to do), a
  /// sleep until the reserved slot, or a stop.
  std::optional<decision> hold_at_gate(duration elapsed);
  /// Tells the gate the probe it admitted is over (once).
  void end_probe() noexcept;
  /// Tells the gate a probe ticket handed out with an attempt is over.
  void probe_over(std::uint64_t ticket) noexcept;
  /// The last instant a gate's wait may end at, for a question at `now` (as the gate sees time).
  duration latest_gate_instant(duration now) const noexcept;
  /// Notes a server's delay: no hedge before elapsed + delay.
  void hold_hedges(duration elapsed, const verdict& v) noexcept;
  /// No permit free for the attempt about to start (`first` or a retry).
  decision no_permit(duration elapsed, bool first);
  /// The budget's part of starting attempt `d` (deposit or token) and the
  /// count; gives a permit back on a stop.
  decision admit(duration elapsed, decision d, bool first);
  /// Gives back a permit no attempt used.
  void permit_unused(duration elapsed) noexcept;

  // The policy (what every operation uses), then the extension.
  duration overall_deadline_;
  duration attempt_limit_;
  duration min_attempt_allowance_;
  duration completion_reserve_;
  duration server_delay_spread_;
  duration timer_slack_;
  duration initial_window_;
  duration max_window_;
  duration backoff_floor_;
  double multiplier_;
  unsigned max_attempts_;
  jitter_kind jitter_;
  unsigned attempts_ = 0;
  extension* ext_ = nullptr;
  random_source* random_;
  retry_budget* budget_;
  retry_gate* gate_;
  concurrency_limit* permits_;
  duration origin_{};
  gate_decision held_{}; // the gate's last wait, presented when asking again (when has_held_)
  std::uint64_t probe_ = 0; // the probe ticket of the attempt admitted, until its start decision carries it
  duration limit_{};
  duration previous_wait_{}; // decorrelated jitter draws from it
  duration last_start_{};    // when the latest attempt started, from the start
  std::optional<stop_reason> stopping_; // decided while attempts ran: the stop once they have ended
  enum class awaiting : unsigned char { nothing, first, retry };
  awaiting permit_for_ = awaiting::nothing; // wait_permit answered for this attempt
  bool permit_held_ = false; // a permit for an attempt answered for and not yet started
  bool has_held_ = false;    // held_ is a wait the gate gave
  bool hedge_at_once_ = false; // an attempt failed while others run: the next hedge is due now
  bool cancelled_ = false;     // the caller cancelled
  bool owns_ext_ = false;    // ext_ was allocated by the core
};

} // namespace coretry

#endif
