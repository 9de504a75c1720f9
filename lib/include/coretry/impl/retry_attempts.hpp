#ifndef CORETRY_IMPL_RETRY_ATTEMPTS_HPP
#define CORETRY_IMPL_RETRY_ATTEMPTS_HPP

// A retrying operation's attempts: each runs on a lane (attempt_runner,
// with its own deadline), hedges are sent when the core says they are due,
// and each attempt's end is taken to the core.

#include <coretry/impl/retry_op.hpp>

namespace coretry::detail {

// The tracker's snapshot at `at` (time since the clock's epoch), when the
// policy takes its limit from it.
template <class Timer, class Factory, class Classifier, class T, class Handler>
std::optional<latency_snapshot> retry_op<Timer, Factory, Classifier, T, Handler>::observe(duration at) const {
  const std::optional<double> percentile = core_.observed_percentile();
  if (!percentile || !tracker_) return std::nullopt;
  return tracker_->snapshot(*percentile, at);
}

// Tells the tracker how the attempt of `record` ended.
template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::record_latency(const attempt_record& record) const noexcept {
  if (!tracker_) return;
  const latency_result result = latency_result_of(record);
  tracker_->record(result, result == latency_result::timeout ? record.allowance : record.end - record.start,
                           detail::saturating_add(core_.origin(), record.end));
}

template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::start_attempt(duration allowance, attempt_kind kind, std::uint64_t probe) {
  // The attempt starts at the instant the core decided it, so the time the
  // core granted is measured from there: an attempt never runs past
  // min(attempt limit, deadline - reserve), however late this code runs.
  const duration at = decided_at_;
  const auto now = saturating_instant(start_, at);
  const std::size_t index = result_.records.size();
  attempt_record& record = result_.records.emplace_back();
  record.number = core_.attempts();
  record.kind = kind;
  record.wait_before = next_wait_;
  record.wait_from = kind == attempt_kind::hedge ? wait_source::none : next_wait_source_;
  record.start = at;
  record.allowance = allowance;
  result_.attempts = record.number;
  next_wait_ = duration::zero();
  if (observer_)
    observer_->attempt_started(
        {operation_, record.number, at, allowance, core_.attempt_limit(), kind});

  const duration deadline = core_.overall_deadline();
  const attempt_context<clock> context{record.number, saturating_instant(now, allowance), allowance,
                                       deadline == duration::max() ? duration::max() : deadline - at};
  std::optional<decltype(factory_(context))> op;
  try {
    op.emplace(factory_(context));
  } catch (...) {
    attempt_end e;
    e.elapsed = e.started = at;
    e.probe = probe;
    e.still_running = lanes_.in_flight();
    exception_ = std::current_exception();
    // A hedge's factory: the core winds the attempts in flight down, and the
    // last to finish delivers the exception.
    const decision d = core_.attempt_threw(e);
    if (d.what != decision::action::stop) return act(d);
    // The first attempt may be created inside the initiating call, where
    // the caller's handler must not run: deliver the exception from the strand.
    boost::asio::post(strand_, make_step([](retry_op& self) { self.fail(); }));
    return;
  }
  phase_ = phase::attempting;
  core_.attempt_started(); // its permit, if any, is now the lane's
  // The gate's probe ticket goes with the attempt that carries it, and back
  // with its end.
  const std::size_t lane = lanes_.acquire(index, probe);
  run_attempt<T>(deadlines_, context.deadline, cancellation_repeat_, repeat_bound(context.deadline),
                 stuck_report{&retry_op::report_stuck, this}, strand_, std::move(*op),
                 attempt_handler{ref(this), lane});
  // A cancellation requested while the attempt was being set up.
  if (cancel_requested() && phase_ == phase::attempting) return on_cancel();
  if (hedging() && kind != attempt_kind::hedge) consider_hedge();
}

// Hedging (coretry/detail/attempt_lanes.hpp holds the lanes): sends the
// hedge the core says is due now, or arms the timer for when it will be.
// The core sends none once a result has been taken, the caller has
// cancelled or the attempts are being wound down.
template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::consider_hedge() {
  if (phase_ != phase::attempting) return;
  if (cancel_requested()) return on_cancel(); // told to the core before it is asked
  const duration at = elapsed();
  const duration now = detail::saturating_add(core_.origin(), at);
  const std::optional<latency_snapshot> observed = observe(now);
  const std::optional<double> percentile = core_.hedge_delay_percentile();
  const std::optional<latency_snapshot> hedge_observed =
      percentile && tracker_ ? std::optional{tracker_->snapshot(*percentile, now)} : std::nullopt;
  const hedge_decision h = core_.next_hedge(at, lanes_.in_flight(), observed ? &*observed : nullptr,
                                            hedge_observed ? &*hedge_observed : nullptr);
  switch (h.what) {
  case hedge_decision::action::send:
    decided_at_ = at;
    report_hedge(hedge_result::sent, core_.attempts(), at);
    start_attempt(h.allowance, attempt_kind::hedge, h.probe);
    return consider_hedge(); // the next one, if there is room for it
  case hedge_decision::action::wait: return arm_hedge_timer(h.at);
  case hedge_decision::action::none: return;
  case hedge_decision::action::refused_budget:
  case hedge_decision::action::refused_gate:
  case hedge_decision::action::refused_limit:
    // Simply not sent: the attempts in flight go on, and no other hedge
    // is tried until one of them fails.
    report_hedge(h.what == hedge_decision::action::refused_budget ? hedge_result::refused_budget
                 : h.what == hedge_decision::action::refused_gate ? hedge_result::refused_gate
                                                                  : hedge_result::refused_limit,
                 core_.attempts() + 1, at);
    return;
  }
}

template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::report_hedge(hedge_result what, unsigned attempt, duration at) {
  if (observer_) observer_->hedge({operation_, what, attempt, at, core_.hedge_delay()});
}

// The hedge timer is an entry in the context's deadline queue, holding a
// reference while queued.
template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::arm_hedge_timer(duration at) {
  add_ref();
  if (deadlines_.place(hedge()->wake, saturating_instant(start_, at), 0) != deadline_queue<Timer>::placed::added)
    release(true); // moved (it keeps the reference it had) or refused (shut down)
}

template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::cancel_hedge_timer() {
  if (hedging() && deadlines_.remove(hedge()->wake)) release(true);
}

// Ends the attempts in flight (terminal cancellation); the last one to
// finish concludes the operation.
template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::wind_down() {
  cancel_hedge_timer();
  lanes_.cancel_all();
}

// How many times a cancelled attempt's cancellation is sent again before
// it counts as stuck: until the overall deadline (the attempt's own when
// there is none) and a few repeats beyond it.
template <class Timer, class Factory, class Classifier, class T, class Handler>
unsigned retry_op<Timer, Factory, Classifier, T, Handler>::repeat_bound(typename clock::time_point attempt_deadline) const {
  constexpr unsigned beyond = 3;
  const duration repeat = cancellation_repeat_;
  if (repeat <= duration::zero()) return 0;
  const duration overall = core_.overall_deadline();
  if (overall == duration::max()) return beyond;
  const auto end = saturating_instant(start_, overall);
  if (end <= attempt_deadline) return beyond;
  const auto until_end = std::chrono::duration_cast<duration>(end - attempt_deadline);
  const auto repeats = until_end / repeat;
  return repeats > 1'000'000 ? 1'000'000u + beyond : static_cast<unsigned>(repeats) + beyond;
}

template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::report_stuck(void* context) {
  auto& self = *static_cast<retry_op*>(context);
  if (self.observer_)
    self.observer_->attempt_stuck({self.operation_, self.core_.attempts(), self.elapsed()});
}

template <class Timer, class Factory, class Classifier, class T, class Handler>
attempt_end retry_op<Timer, Factory, Classifier, T, Handler>::end_of(const attempt_record& record,
                                                                 std::uint64_t probe) const {
  attempt_end e;
  e.elapsed = record.end;
  e.started = record.start;
  e.allowance = record.allowance;
  e.probe = probe;
  e.still_running = lanes_.in_flight();
  return e;
}

// An attempt's end, told to the core, which gives back its probe ticket
// and permit and answers the next step.
template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::on_attempt(std::size_t lane, attempt_completion<T>&& done) {
  attempt_record& record = result_.records[lanes_[lane].record];
  const std::uint64_t probe = lanes_[lane].probe;
  lanes_.release(lane);
  record.end = elapsed();
  record.error = done.error;
  attempt_end e = end_of(record, probe);
  if (core_.stopping()) return on_wound_down(record, e, std::move(done));
  if (e.still_running == 0) phase_ = phase::deciding;
  if (done.exception) return attempt_threw(e, std::move(done.exception));
  result_.last_error = done.error;
  result_.value = std::move(done.value);
  if (result_.value) record.connection = connection_of<T>::get(*result_.value);
  try {
    e.classified = classify_(static_cast<const boost::system::error_code&>(done.error),
                             static_cast<const T&>(*result_.value));
  } catch (...) {
    // As a throwing factory: the other attempts are wound down, and the
    // last to finish delivers the exception.
    return attempt_threw(e, std::current_exception());
  }
  e.timed_out = done.error == attempt_error::timed_out;
  e.caller_cancelled = cancel_requested();
  if (e.still_running == 0) cancel_hedge_timer();
  const decision d = core_.attempt_finished(e, safety_);
  record.classified = e.classified;
  if (observer_) observer_->attempt_finished({operation_, record});
  if (!e.abandoned) record_latency(record);
  if ((d.what == decision::action::stop || d.what == decision::action::wind_down) &&
      d.reason == stop_reason::succeeded)
    take_winner(record);
  act(d);
}

template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::attempt_threw(const attempt_end& e, std::exception_ptr exception) {
  exception_ = std::move(exception);
  act(core_.attempt_threw(e));
}

template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::take_winner(const attempt_record& record) {
  result_.winner = record.number;
  if (record.kind == attempt_kind::hedge) report_hedge(hedge_result::won, record.number, record.end);
}

// An attempt that finished after the operation had decided to stop (a
// hedge that lost, or one wound down after a failure or the caller's
// cancellation): recorded, never classified, never told to the gate, and
// its value is not taken.
template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::on_wound_down(attempt_record& record, const attempt_end& e,
                                                                    attempt_completion<T>&& done) {
  const decision d = core_.attempt_abandoned(e);
  record.superseded = core_.stopping() == stop_reason::succeeded;
  if (done.value) record.connection = connection_of<T>::get(*done.value);
  record.classified = verdict::permanent(record.superseded ? "superseded" : "cancelled", delivery::unknown);
  if (observer_) observer_->attempt_finished({operation_, record});
  act(d);
}

} // namespace coretry::detail

#endif
