#include <coretry/decision_core.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace coretry {

using detail::saturating_add;

namespace {

duration draw_up_to(random_source& random, duration max_inclusive) {
  if (max_inclusive <= duration::zero()) return duration::zero();
  return duration(static_cast<duration::rep>(random.uniform(static_cast<std::uint64_t>(max_inclusive.count()))));
}

const policy& validated(const policy& p) {
  if (auto problem = p.validate()) throw std::invalid_argument("coretry::policy: " + *problem);
  return p;
}

} // namespace

duration backoff_window(const backoff_policy& backoff, unsigned retry_index) noexcept {
  const long double window = static_cast<long double>(backoff.initial_window.count()) *
                             std::pow(static_cast<long double>(backoff.multiplier), retry_index);
  if (!std::isfinite(window) || window >= static_cast<long double>(backoff.max_window.count()))
    return backoff.max_window;
  return duration(static_cast<duration::rep>(std::llround(window)));
}

decision_core::decision_core(const coretry::policy& p, random_source& random, retry_budget* budget,
                             retry_gate* gate, concurrency_limit* limit, void* storage)
    : decision_core(checked_policy{}, validated(p), random, budget, gate, limit, storage) {}

decision_core::decision_core(checked_policy, const coretry::policy& p, random_source& random,
                             retry_budget* budget, retry_gate* gate, concurrency_limit* limit, void* storage)
    : overall_deadline_(p.overall_deadline), attempt_limit_(p.attempt_limit),
      min_attempt_allowance_(p.min_attempt_allowance), completion_reserve_(p.completion_reserve),
      server_delay_spread_(p.server_delay_spread), timer_slack_(p.timer_slack),
      initial_window_(p.backoff.initial_window), max_window_(p.backoff.max_window), backoff_floor_(p.backoff.floor),
      multiplier_(p.backoff.multiplier), max_attempts_(p.max_attempts), jitter_(p.backoff.jitter), random_(&random),
      budget_(budget), gate_(gate), permits_(limit) {
  if (!needs_extension(p)) return;
  const extension e{p.hedging, p.observed, p.hedging.delay_percentile ? duration::zero() : p.hedging.delay, {}};
  if (storage) {
    ext_ = ::new (storage) extension(e);
  } else {
    ext_ = new extension(e);
    owns_ext_ = true;
  }
}

duration decision_core::usable_after(duration elapsed) const noexcept {
  if (overall_deadline_ == duration::max()) return duration::max();
  return overall_deadline_ - elapsed - completion_reserve_;
}

duration decision_core::local_backoff(unsigned retry_index) {
  const backoff_policy b{initial_window_, multiplier_, max_window_, jitter_, backoff_floor_};
  const duration window = backoff_window(b, retry_index);
  duration wait{};
  switch (b.jitter) {
  case jitter_kind::none: wait = window; break;
  case jitter_kind::full: wait = draw_up_to(*random_, window); break;
  case jitter_kind::equal: {
    const duration half = window / 2;
    wait = (window - half) + draw_up_to(*random_, half);
    break;
  }
  case jitter_kind::decorrelated: {
    // Each wait is drawn between the initial window and three times the
    // previous wait, so consecutive clients drift apart instead of marching
    // in step; the cap still bounds every wait.
    const duration low = b.initial_window;
    const duration previous = retry_index == 0 ? low : previous_wait_;
    const duration high = std::max(low, previous > duration::max() / 3 ? duration::max() : previous * 3);
    wait = std::min(b.max_window, low + draw_up_to(*random_, high - low));
    break;
  }
  }
  previous_wait_ = wait;
  return std::max(wait, b.floor);
}

duration observed_attempt_limit(const observed_limit& o, const latency_snapshot& s) noexcept {
  if (s.successes < o.warm_up) return o.ceiling;
  // margin x percentile, rounded up, saturating.
  const long double scaled = static_cast<long double>(s.percentile.count()) * o.margin;
  duration limit = scaled >= static_cast<long double>(duration::max().count())
                       ? duration::max()
                       : duration(static_cast<duration::rep>(std::ceil(scaled)));
  if (s.censored_majority) limit = std::max(limit, saturating_add(s.longest_censored, s.longest_censored));
  return std::clamp(limit, o.floor, o.ceiling);
}

decision decision_core::start_if_useful(duration elapsed, const latency_snapshot* observed) {
  // The remaining time decides whether an attempt is useful; the limit only
  // how long it may take (an observed limit may be below the minimum).
  const duration usable = usable_after(elapsed);
  if (usable <= duration::zero() || usable < min_attempt_allowance_)
    return decision::stop(stop_reason::deadline_exhausted);
  limit_ = ext_ && ext_->observed
               ? observed_attempt_limit(*ext_->observed, observed ? *observed : latency_snapshot{})
               : attempt_limit_;
  return decision::start_attempt(std::min(limit_, usable));
}

decision decision_core::begin(duration origin, const latency_snapshot* observed) {
  origin_ = origin;
  decision d = start_if_useful(duration::zero(), observed);
  if (d.what != decision::action::start_attempt) return d;
  if (gate_ && !gate_->allow_first_attempt(origin, *random_)) return decision::stop(stop_reason::dependency_unhealthy);
  if (permits_ && !permits_->try_acquire()) return no_permit(duration::zero(), true);
  return admit(duration::zero(), d, true);
}

limit_signal limit_signal_of(const verdict& v, bool timed_out, bool abandoned, bool cut_short) noexcept {
  if (abandoned || (timed_out && cut_short)) return limit_signal::ignored;
  if (timed_out || v.overload) return limit_signal::drop;
  if (v.status == attempt_status::success || v.delivered == delivery::answered) return limit_signal::sample;
  return limit_signal::ignored;
}

decision decision_core::no_permit(duration elapsed, bool first) {
  const concurrency_limit::options& o = permits_->settings();
  // The wait is short, and never longer than the time after which the
  // attempt would no longer be useful.
  duration wait = std::min(o.max_wait, min_attempt_allowance_ > usable_after(elapsed)
                                           ? duration::zero()
                                           : usable_after(elapsed) - min_attempt_allowance_);
  if (o.max_waiters == 0 || wait <= duration::zero()) {
    permits_->count_refusal();
    return permit_refused();
  }
  permit_for_ = first ? awaiting::first : awaiting::retry;
  return decision::wait_permit(wait);
}

decision decision_core::admit(duration elapsed, decision d, bool first) {
  if (first) {
    if (budget_) budget_->record_initial_request();
  } else if (budget_ && !budget_->try_acquire_retry()) {
    // The token is taken immediately before the retry is sent, after the
    // deadline check, so a retry that will not happen costs no token. One
    // admitted by the gate that finds the bucket emptied by another thread
    // meanwhile gives its probe back, and its permit.
    if (permits_) permit_unused(elapsed);
    end_probe();
    return decision::stop(stop_reason::budget_exhausted);
  }
  ++attempts_;
  last_start_ = elapsed;
  permit_held_ = permits_ != nullptr;
  // The gate's probe ticket goes with the attempt, and comes back with its end.
  d.probe = std::exchange(probe_, 0);
  return d;
}

decision decision_core::permit_granted(duration elapsed, const latency_snapshot* observed) {
  const bool first = permit_for_ == awaiting::first;
  permit_for_ = awaiting::nothing;
  decision d = cancelled_ ? decision::stop(stop_reason::cancelled) : start_if_useful(elapsed, observed);
  if (d.what != decision::action::start_attempt) {
    permit_unused(elapsed);
    end_probe();
    return d;
  }
  return admit(elapsed, d, first);
}

decision decision_core::permit_refused() {
  permit_for_ = awaiting::nothing;
  end_probe();
  return decision::stop(cancelled_ ? stop_reason::cancelled : stop_reason::concurrency_limited);
}

void decision_core::give_back(const attempt_end& e, limit_signal signal) noexcept {
  probe_over(e.probe);
  if (std::exchange(permit_held_, false)) permit_unused(e.elapsed); // never started
  else if (permits_) permits_->release(saturating_add(origin_, e.elapsed), e.elapsed - e.started, signal);
}

void decision_core::permit_unused(duration elapsed) noexcept {
  permits_->release(saturating_add(origin_, elapsed), duration::zero(), limit_signal::ignored);
}

decision_core::~decision_core() {
  end_probe();
  if (permit_held_) permit_unused(last_start_);
  if (owns_ext_) delete ext_;
  else if (ext_) ext_->~extension();
}

void decision_core::end_probe() noexcept {
  if (gate_ && probe_ != 0) gate_->probe_ended(std::exchange(probe_, 0));
}

void decision_core::probe_over(std::uint64_t ticket) noexcept {
  if (gate_ && ticket != 0) gate_->probe_ended(ticket);
}

void decision_core::hold_hedges(duration elapsed, const verdict& v) noexcept {
  if (ext_ && v.server_delay && *v.server_delay > duration::zero())
    ext_->hedge_hold = std::max(ext_->hedge_hold, saturating_add(elapsed, *v.server_delay));
}

decision decision_core::attempt_finished(attempt_end& e, repeat_safety safety) {
  cancelled_ = cancelled_ || e.caller_cancelled;
  // A failure after the caller's cancellation says so, whatever error its
  // operations reported on the way out; a success stands.
  if (cancelled_ && e.classified.status != attempt_status::success) {
    e.classified = verdict::permanent("cancelled", delivery::unknown);
    e.abandoned = true;
    give_back(e, limit_signal::ignored);
    if (e.still_running == 0) return decision::stop(stop_reason::cancelled);
    stopping_ = stop_reason::cancelled;
    return decision::none();
  }
  const verdict& v = e.classified;
  if (gate_) gate_->record(v.status, saturating_add(origin_, e.elapsed));
  // A timeout at the overall deadline, before the attempt's own limit, says
  // only that the operation ran out of time.
  give_back(e, limit_signal_of(v, e.timed_out, false, e.allowance < limit_));
  hold_hedges(e.elapsed, v);
  if (const std::optional<stop_reason> stop = verdict_stop(v, safety)) {
    if (e.still_running == 0) return decision::stop(*stop);
    stopping_ = stop;
    return decision::wind_down(*stop);
  }
  if (e.still_running > 0) {
    hedge_at_once_ = true;
    return decision::hedge();
  }
  hedge_at_once_ = false;
  decision d = plan_retry(e.elapsed, v);
  // A retry the budget would refuse now is not slept for: the operation stops
  // at once. The token itself is taken after the sleep (sleep_finished).
  if (d.what == decision::action::sleep && budget_ && !budget_->retry_available())
    return decision::stop(stop_reason::budget_exhausted);
  return d;
}

decision decision_core::attempt_abandoned(const attempt_end& e) {
  give_back(e, limit_signal::ignored);
  if (e.still_running > 0 || !stopping_) return decision::none();
  return decision::stop(*stopping_);
}

decision decision_core::attempt_threw(const attempt_end& e) {
  give_back(e, limit_signal::ignored);
  if (e.still_running == 0) return decision::stop(stop_reason::rejected);
  stopping_ = stop_reason::rejected;
  return decision::wind_down(stop_reason::rejected);
}

decision decision_core::caller_cancelled(duration elapsed, unsigned running) {
  cancelled_ = true;
  // A wait for a permit ends first: its end's event answers the stop.
  if (permit_for_ != awaiting::nothing) return decision::none();
  // Every attempt still running is sent the cancellation, even once the
  // operation is stopping (an attempt's end that counted as cancelled
  // decided it before this event came).
  if (running > 0) return decision::wind_down(stopping_.value_or(stop_reason::cancelled));
  if (stopping_) return decision::none();
  // An attempt answered for and not started: its permit and probe go back.
  if (std::exchange(permit_held_, false)) permit_unused(elapsed);
  end_probe();
  return decision::stop(stop_reason::cancelled);
}

std::optional<stop_reason> decision_core::verdict_stop(const verdict& v, repeat_safety safety) noexcept {
  switch (v.status) {
  case attempt_status::success: return stop_reason::succeeded;
  case attempt_status::permanent: return stop_reason::rejected;
  case attempt_status::transient: break;
  }
  const bool safe_to_repeat = safety != repeat_safety::unsafe || v.delivered == delivery::never_sent;
  if (!safe_to_repeat) return v.delivered == delivery::answered ? stop_reason::rejected : stop_reason::outcome_unknown;
  return std::nullopt;
}

decision decision_core::plan_retry(duration elapsed, const verdict& v) {
  // Never sleep after the final allowed attempt: there is no request to schedule.
  if (attempts_ >= max_attempts_) return decision::stop(stop_reason::attempts_exhausted);

  // The longest wait after which a useful attempt can still start.
  const duration usable = usable_after(elapsed);
  if (usable < min_attempt_allowance_ || usable <= duration::zero())
    return decision::stop(stop_reason::deadline_exhausted);
  // A planned wait ends timer_slack before the last instant at which an
  // attempt could still get its minimum allowance: real timers fire late.
  if (usable != duration::max() && usable - min_attempt_allowance_ < timer_slack_)
    return decision::stop(stop_reason::deadline_exhausted);
  const duration longest_wait =
      usable == duration::max() ? usable : usable - min_attempt_allowance_ - timer_slack_;

  // The server's delay is a minimum: never shortened, never truncated by the
  // local cap. When it does not fit, stop now rather than sleep and fail later.
  const duration server = v.server_delay ? std::max(*v.server_delay, duration::zero()) : duration::zero();
  if (v.server_delay && server > longest_wait) return decision::stop(stop_reason::server_delay_too_long);

  const duration local = local_backoff(attempts_ - 1);
  if (!v.server_delay) {
    if (local > longest_wait) return decision::stop(stop_reason::deadline_exhausted);
    return decision::sleep(local, wait_source::local);
  }
  const duration base = std::max(server, local);
  const wait_source source = server >= local ? wait_source::server : wait_source::local;
  if (base > longest_wait) return decision::stop(stop_reason::deadline_exhausted);
  // A small positive spread keeps clients told the same instant from
  // returning together; it is ours, so it may shrink to fit the deadline.
  duration spread{};
  if (server_delay_spread_ > duration::zero())
    spread = duration(1) + draw_up_to(*random_, server_delay_spread_ - duration(1));
  spread = std::min(spread, longest_wait - base);
  return decision::sleep(saturating_add(base, spread), source);
}

decision decision_core::sleep_finished(duration elapsed, const latency_snapshot* observed) {
  if (cancelled_) return decision::stop(stop_reason::cancelled);
  decision d = start_if_useful(elapsed, observed);
  if (d.what != decision::action::start_attempt) return d;
  if (gate_) {
    // A retry the bucket could not pay for is not held, nor given a slot.
    if (budget_ && !budget_->retry_available()) return decision::stop(stop_reason::budget_exhausted);
    if (std::optional<decision> held = hold_at_gate(elapsed)) return *held;
  }
  // The gate first, then the limit, then the budget.
  if (permits_ && !permits_->try_acquire()) return no_permit(elapsed, false);
  return admit(elapsed, d, false);
}

std::optional<duration> observed_hedge_delay(const hedging_policy& h, const latency_snapshot* s,
                                             duration attempt_limit) noexcept {
  if (!s || s->successes < h.min_successes) return std::nullopt;
  constexpr duration floor = std::chrono::milliseconds(1);
  return std::clamp(s->percentile, floor, std::max(floor, attempt_limit));
}

hedge_decision decision_core::next_hedge(duration elapsed, unsigned in_flight, const latency_snapshot* observed,
                                         const latency_snapshot* hedge_observed) {
  hedge_decision h = hedge_due(elapsed, in_flight, observed, hedge_observed);
  // Sent or refused, an immediate hedge is over: the next waits for its delay
  // (or the next failure).
  if (h.what != hedge_decision::action::wait && h.what != hedge_decision::action::none) hedge_at_once_ = false;
  return h;
}

hedge_decision decision_core::hedge_due(duration elapsed, unsigned in_flight, const latency_snapshot* observed,
                                        const latency_snapshot* hedge_observed) {
  using action = hedge_decision::action;
  const bool at_once = hedge_at_once_;
  if (!ext_ || stopping_ || cancelled_) return {};
  const hedging_policy& h = ext_->hedging;
  if (h.max_hedges == 0 || in_flight > h.max_hedges || attempts_ >= max_attempts_) return {};
  if (h.delay_percentile) {
    const std::optional<duration> delay = observed_hedge_delay(h, hedge_observed, limit_);
    if (delay) ext_->hedge_delay = *delay;
    else if (!at_once) return {};
  }
  const duration due =
      std::max(at_once ? elapsed : saturating_add(last_start_, ext_->hedge_delay), ext_->hedge_hold);
  if (due > elapsed) return {action::wait, {}, due};
  const decision start = start_if_useful(elapsed, observed);
  if (start.what != decision::action::start_attempt) return {};
  if (budget_ && !budget_->retry_available()) return {action::refused_budget};
  std::uint64_t ticket = 0;
  if (gate_) {
    const duration now = saturating_add(origin_, elapsed);
    const gate_decision answer = gate_->ask(now, latest_gate_instant(now), nullptr);
    if (answer.what == gate_decision::action::deny ||
        (answer.what == gate_decision::action::wait && answer.at > now))
      return {action::refused_gate};
    if (answer.what == gate_decision::action::admit) ticket = answer.ticket;
  }
  // A hedge is sent on a spare permit only: it never waits for one.
  if (permits_ && !permits_->try_acquire()) {
    probe_over(ticket);
    return {action::refused_limit};
  }
  if (budget_ && !budget_->try_acquire_retry()) {
    if (permits_) permit_unused(elapsed);
    probe_over(ticket);
    return {action::refused_budget};
  }
  ++attempts_;
  last_start_ = elapsed;
  permit_held_ = permits_ != nullptr;
  return {action::send, start.allowance, {}, ticket};
}

duration decision_core::latest_gate_instant(duration now) const noexcept {
  if (overall_deadline_ == duration::max()) return duration::max();
  const duration last_start = overall_deadline_ - completion_reserve_ - min_attempt_allowance_ - timer_slack_;
  return std::max(now, saturating_add(origin_, std::max(last_start, duration::zero())));
}

std::optional<decision> decision_core::hold_at_gate(duration elapsed) {
  const duration now = saturating_add(origin_, elapsed);
  // The last instant a wait may end at: as for a planned backoff, timer_slack
  // before the last one at which an attempt still gets its minimum
  // allowance. An attempt now is useful (start_if_useful said so) even if
  // the slack is already eaten into.
  const duration latest = latest_gate_instant(now);
  const gate_decision answer = gate_->ask(now, latest, has_held_ ? &held_ : nullptr);
  switch (answer.what) {
  case gate_decision::action::admit:
    has_held_ = false;
    probe_ = answer.ticket;
    return std::nullopt;
  case gate_decision::action::wait:
    if (answer.at <= now) { // a slot already due is an admission
      has_held_ = false;
      return std::nullopt;
    }
    if (answer.at > latest) break;
    held_ = answer;
    has_held_ = true;
    return decision::sleep(answer.at - now, wait_source::gate);
  case gate_decision::action::deny: break;
  }
  has_held_ = false;
  return decision::stop(stop_reason::dependency_unhealthy);
}

} // namespace coretry
