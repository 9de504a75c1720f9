#ifndef CORETRY_IMPL_RETRY_STEPS_HPP
#define CORETRY_IMPL_RETRY_STEPS_HPP

// A retrying operation's steps: it carries out the decision core's answers
// (start an attempt, sleep, wait for a permit, wind down, stop) with the
// context's deadline queue and the caller's cancellation. It decides
// nothing itself.

#include <coretry/impl/retry_op.hpp>

namespace coretry::detail {

// Initiation: runs in the caller's call to async_retry.
template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::launch() {
  ref self(this);
  caller_.attach(boost::asio::get_associated_cancellation_slot(handler_), this);
  start_ = now();
  const auto origin = std::chrono::duration_cast<duration>(start_.time_since_epoch());
  const std::optional<latency_snapshot> observed = observe(origin);
  const decision first = core_.begin(origin, observed ? &*observed : nullptr);
  if (first.what == decision::action::stop) {
    // Never complete inside the initiating call: finish from the strand.
    const stop_reason reason = first.reason;
    boost::asio::post(strand_, make_step([reason](retry_op& op) { op.finish(reason); }));
    self.done(true);
    return;
  }
  // The first attempt starts on the strand (at once when the caller already
  // runs there): started from any other thread, its completion could run on
  // the strand while this call was still arming its deadline.
  boost::asio::dispatch(strand_, make_step([first](retry_op& op) {
                          if (!op.cancel_requested()) return op.act(first);
                          op.act(op.core_.caller_cancelled(duration::zero(), 0));
                          // A wait for a permit not begun ends at once, without one.
                          if (op.core_.waiting_for_permit()) op.act(op.core_.permit_refused());
                        }));
  // On a multi-threaded context the whole operation may end on other
  // threads before this call returns: if this reference is then the last,
  // the handler is posted, never called inside the initiating call.
  self.done(true);
}

template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::on_cancel() {
  switch (phase_) {
  case phase::attempting:
    // The core answers wind_down: any cancellation becomes terminal for the
    // attempts. A runner never completes inside this emission.
    return act(core_.caller_cancelled(elapsed(), lanes_.in_flight()));
  case phase::sleeping: wake_early(); break;
  case phase::waiting_permit:
    // Told to the core first (which answers once the wait has ended); out
    // of the queue, unless a permit is already on its way (its step then
    // tells the core it came).
    act(core_.caller_cancelled(elapsed(), 0));
    if (core_.limit()->cancel_wait(*permit(), false) == concurrency_limit::cancel_result::granted) break;
    end_permit_wait(false);
    act(core_.permit_refused());
    break;
  case phase::starting: // the first step looks at the request
  case phase::deciding: // the next step looks at the request
  case phase::done: break;
  }
}

template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::act(const decision& d) {
  switch (d.what) {
  case decision::action::start_attempt:
    return start_attempt(d.allowance, core_.attempts() == 1 ? attempt_kind::first : attempt_kind::retry, d.probe);
  case decision::action::sleep: return sleep(d);
  case decision::action::stop: return exception_ ? fail() : finish(d.reason); // an exception is delivered instead
  case decision::action::wait_permit: return wait_for_permit(d.wait);
  case decision::action::wind_down: return wind_down();
  case decision::action::hedge: return consider_hedge();
  case decision::action::none: return;
  }
}

// The concurrency limit had no permit free: wait in its queue, at most
// `wait` (an entry in the context's deadline queue, holding a reference).
template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::wait_for_permit(duration wait) {
  switch (core_.limit()->wait(*permit())) {
  case concurrency_limit::wait_result::acquired: return permit_arrived();
  case concurrency_limit::wait_result::refused: return act(core_.permit_refused());
  case concurrency_limit::wait_result::queued: break;
  }
  phase_ = phase::waiting_permit;
  permit()->wait_from = elapsed();
  add_ref();
  if (deadlines_.place(wake_, saturating_instant(now(), wait), ++wake_generation_) !=
      deadline_queue<Timer>::placed::added) {
    // The execution context has shut down: nothing will run again (a permit
    // granted meanwhile goes back when the operation is destroyed).
    core_.limit()->cancel_wait(*permit(), false);
    release(true);
    return;
  }
  if (cancel_requested()) on_cancel();
}

// A permit for the attempt the core is waiting to start.
template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::permit_arrived() {
  if (phase_ == phase::waiting_permit) end_permit_wait(true); // it had queued
  decided_at_ = elapsed();
  if (cancel_requested()) act(core_.caller_cancelled(decided_at_, 0)); // the core then gives the permit back
  const std::optional<latency_snapshot> observed = observe(detail::saturating_add(core_.origin(), decided_at_));
  act(core_.permit_granted(decided_at_, observed ? &*observed : nullptr));
}

// The wait for a permit ended without one, unless one is on its way.
template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::on_permit_wait_over() {
  const bool cancelled = cancel_requested(); // its step may come after this one: the caller's request wins
  if (core_.limit()->cancel_wait(*permit(), !cancelled) == concurrency_limit::cancel_result::granted) return;
  end_permit_wait(false);
  decided_at_ = elapsed();
  if (cancelled) act(core_.caller_cancelled(decided_at_, 0));
  act(core_.permit_refused());
}

// The wait in the limit's queue is over: its wake-up goes, and the observer is told.
template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::end_permit_wait(bool granted) {
  if (deadlines_.remove(wake_)) release(true);
  if (observer_)
    observer_->permit_waited(
        {operation_, core_.attempts() + 1, permit()->wait_from, elapsed() - permit()->wait_from, granted});
}

// The wake-up entry fired: the end of a sleep, or of a wait for a permit.
// One placed before the latest placement is stale.
template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::on_wake(unsigned generation) {
  if (generation != wake_generation_) return;
  if (phase_ == phase::sleeping) return on_sleep({});
  if (phase_ == phase::waiting_permit && core_.waiting_for_permit()) return on_permit_wait_over();
}

template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::sleep(const decision& d) {
  // A wait at the retry gate follows the backoff: the attempt's record
  // shows the whole wait before it, from the source that ended it.
  next_wait_ += d.wait;
  next_wait_source_ = d.source;
  result_.total_backoff += d.wait;
  if (observer_)
    observer_->backoff_scheduled({operation_, core_.attempts() + 1, elapsed(), d.wait, d.source});
  phase_ = phase::sleeping;
  // The wake-up is a deadline in the context's queue, holding a reference.
  add_ref();
  if (deadlines_.place(wake_, saturating_instant(now(), d.wait), ++wake_generation_) !=
      deadline_queue<Timer>::placed::added) {
    // The execution context has shut down: nothing will run again.
    release(true);
    return;
  }
  // A cancellation requested before the wake-up was queued.
  if (cancel_requested()) wake_early();
}

// Ends the sleep now, as cancelled: unless the wake-up has already been
// taken from the queue (it is then on its way and sees the request).
template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::wake_early() {
  if (!deadlines_.remove(wake_)) return;
  boost::asio::post(strand_, adopt_step([](retry_op& op) { op.on_sleep(boost::asio::error::operation_aborted); }));
}

template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::on_sleep(boost::system::error_code ec) {
  // Cancellation is re-checked after every sleep, before any new attempt.
  decided_at_ = elapsed();
  if (ec || cancel_requested()) return act(core_.caller_cancelled(decided_at_, 0));
  const std::optional<latency_snapshot> observed = observe(detail::saturating_add(core_.origin(), decided_at_));
  act(core_.sleep_finished(decided_at_, observed ? &*observed : nullptr));
}

template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::finish(stop_reason reason) {
  result_.reason = reason;
  result_.attempts = static_cast<unsigned>(result_.records.size());
  result_.elapsed = elapsed();
  if (observer_)
    observer_->stopped({operation_, reason, result_.attempts, result_.elapsed, result_.total_backoff});
  end();
}

template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::fail() {
  result_.attempts = static_cast<unsigned>(result_.records.size());
  end();
}

// The handler is called once the last reference is gone (release).
template <class Timer, class Factory, class Classifier, class T, class Handler>
void retry_op<Timer, Factory, Classifier, T, Handler>::end() {
  cancel_hedge_timer();
  phase_ = phase::done;
  finished_ = true;
  if (clear_in_place_) caller_.detach_and_clear();
  else caller_.detach();
}

} // namespace coretry::detail

#endif
