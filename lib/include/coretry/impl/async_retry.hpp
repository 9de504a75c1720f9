#ifndef CORETRY_IMPL_ASYNC_RETRY_HPP
#define CORETRY_IMPL_ASYNC_RETRY_HPP

// The asynchronous layer: carries out the decision core's steps with a timer
// and cancellation slots. It decides nothing itself.

#include <coretry/detail/attempt_runner.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/detail/concurrency_hint.hpp>
#include <boost/asio/detail/scheduler.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <memory>

namespace coretry::detail {

template <class Executor>
struct is_strand : std::false_type {};
template <class Inner>
struct is_strand<boost::asio::strand<Inner>> : std::true_type {};

/// True when the io_context was made for one thread (concurrency hint 1, or
/// a hint that turns the scheduler's locking off): the owner promised Asio
/// that a single thread runs it, so its handlers already run one at a time.
inline bool is_single_threaded(boost::asio::io_context& context) {
  const int hint = boost::asio::use_service<boost::asio::detail::scheduler>(context).concurrency_hint();
  return hint == 1 || !BOOST_ASIO_CONCURRENCY_HINT_IS_LOCKING(SCHEDULER, hint);
}

/// True when `ex` is known to run handlers one at a time: a strand, directly
/// or inside an any_io_executor, or the executor of a single-threaded
/// io_context (an io_context per thread needs no strand per operation).
template <class Executor>
bool is_serial_executor(const Executor& ex) {
  if constexpr (is_strand<Executor>::value) {
    return true;
  } else if constexpr (std::is_same_v<Executor, boost::asio::io_context::executor_type>) {
    return is_single_threaded(ex.context());
  } else if constexpr (std::is_same_v<Executor, boost::asio::any_io_executor>) {
    using io_strand = boost::asio::strand<boost::asio::io_context::executor_type>;
    if (ex.template target<io_strand>() != nullptr ||
        ex.template target<boost::asio::strand<boost::asio::any_io_executor>>() != nullptr)
      return true;
    const auto* io = ex.template target<boost::asio::io_context::executor_type>();
    return io != nullptr && is_single_threaded(io->context());
  } else {
    (void)ex;
    return false;
  }
}

/// The strand an operation runs its steps on: the completion handler's own
/// executor when that is serial (no allocation, and the caller's
/// cancellation is then serialised with the operation), else the I/O
/// executor when that is serial, else a new strand of it.
template <class HandlerExecutor, class Executor>
boost::asio::any_io_executor make_operation_strand(const HandlerExecutor& handler_ex, const Executor& io_ex) {
  if constexpr (std::is_convertible_v<HandlerExecutor, boost::asio::any_io_executor>)
    if (is_serial_executor(handler_ex)) return handler_ex;
  if (is_serial_executor(io_ex)) return io_ex;
  return boost::asio::make_strand(io_ex);
}

/// Reads the time from the timer's clock: through the timer when it keeps its
/// own time (virtual time in tests), else through the clock's static now().
template <class Timer>
typename Timer::time_point timer_now(const Timer& timer) {
  if constexpr (requires { timer.now(); })
    return timer.now();
  else
    return Timer::clock_type::now();
}

struct stopped_before_start {};
struct factory_threw {};
struct first_attempt {};

template <class Timer, class Strand, class Factory, class Classifier, class T>
class retry_operation {
  using clock = typename Timer::clock_type;

  struct state {
    template <class Executor, class F, class C>
    state(const Executor& ex, const policy& p, const retry_options& o, F&& f, C&& c)
        : timer(ex), options(o),
          core(p, o.random ? *o.random : independent_random::instance(), o.budget),
          factory(std::forward<F>(f)), classify(std::forward<C>(c)) {
      result.records.reserve(p.max_attempts < 8 ? p.max_attempts : 8);
    }

    Strand strand; // chosen at launch: see async_retry
    Timer timer;
    retry_options options;
    decision_core core;
    Factory factory;
    Classifier classify;
    outcome<T> result;
    typename Timer::time_point start{};
    duration next_wait{};
    wait_source next_wait_source = wait_source::none;
    std::exception_ptr pending_exception;
    duration decided_at{}; ///< when the core last decided, from the start
    duration first_allowance{}; ///< what begin() granted, for the first attempt
  };

public:
  template <class Executor, class F, class C>
  static std::unique_ptr<state> make_state(const Executor& ex, const policy& p, const retry_options& o, F&& f,
                                           C&& c) {
    return std::make_unique<state>(ex, p, o, std::forward<F>(f), std::forward<C>(c));
  }

  explicit retry_operation(std::unique_ptr<state> s) : st_(std::move(s)) {}

  // Initiation. The clock starts here; the first attempt starts on the
  // strand (at once when the caller already runs there). Started from any
  // other thread, its completion could run on the strand while this call
  // was still setting up its deadline.
  template <class Self>
  void operator()(Self& self) {
    self.reset_cancellation_state(boost::asio::enable_partial_cancellation());
    st_->start = timer_now(st_->timer);
    const decision first = st_->core.begin();
    if (first.what == decision::action::stop) {
      // Never complete inside the initiating call: finish from the strand.
      st_->result.reason = first.reason;
      const Strand strand = st_->strand;
      return boost::asio::post(strand, boost::asio::append(std::move(self), stopped_before_start{}));
    }
    st_->first_allowance = first.allowance;
    // Copied first: moving `self` moves this operation, and st_ with it.
    const Strand strand = st_->strand;
    boost::asio::dispatch(boost::asio::bind_executor(strand, boost::asio::append(std::move(self), first_attempt{})));
  }

  template <class Self>
  void operator()(Self& self, first_attempt) {
    start_attempt(self, st_->first_allowance);
  }

  // The attempt factory threw (a programming error): it propagates.
  template <class Self>
  void operator()(Self& self, factory_threw) {
    fail(self, st_->pending_exception);
  }

  // The deferred completion of an operation that stopped before any attempt.
  template <class Self>
  void operator()(Self& self, stopped_before_start) {
    finish(self, st_->result.reason);
  }

  // An attempt finished.
  template <class Self>
  void operator()(Self& self, attempt_completion<T> done) {
    state& s = *st_;
    if (done.exception) return fail(self, done.exception);
    attempt_record& record = s.result.records.back();
    record.end = elapsed();
    record.error = done.error;
    s.result.last_error = done.error;
    s.result.value = std::move(done.value);
    try {
      record.classified = s.classify(static_cast<const boost::system::error_code&>(done.error),
                                     static_cast<const T&>(*s.result.value));
    } catch (...) {
      return fail(self, std::current_exception());
    }
    const bool cancelled = record.classified.status != attempt_status::success &&
                           self.cancelled() != boost::asio::cancellation_type::none;
    // An attempt ended by the caller's cancellation says so, whatever error
    // its operations reported on the way out.
    if (cancelled) record.classified = verdict::permanent("cancelled", delivery::unknown);
    if (s.options.observer) s.options.observer->attempt_finished({s.options.operation, record});
    if (cancelled) return finish(self, stop_reason::cancelled);
    act(self, s.core.attempt_finished(record.end, record.classified, s.options.safety));
  }

  // A backoff sleep finished.
  template <class Self>
  void operator()(Self& self, boost::system::error_code ec) {
    // Cancellation is re-checked after every sleep, before any new attempt.
    if (ec || self.cancelled() != boost::asio::cancellation_type::none)
      return finish(self, stop_reason::cancelled);
    st_->decided_at = elapsed();
    act(self, st_->core.sleep_finished(st_->decided_at));
  }

private:
  duration elapsed() const { return timer_now(st_->timer) - st_->start; }

  template <class Self>
  void act(Self& self, const decision& d) {
    switch (d.what) {
    case decision::action::start_attempt: return start_attempt(self, d.allowance);
    case decision::action::sleep: return sleep(self, d);
    case decision::action::stop: return finish(self, d.reason);
    }
  }

  template <class Self>
  void start_attempt(Self& self, duration allowance) {
    state& s = *st_;
    // The attempt starts at the instant the core decided it, so the time the
    // core granted is measured from there: an attempt never runs past
    // min(attempt limit, deadline - reserve), however late this code runs.
    const duration at = s.decided_at;
    const auto now = saturating_instant(s.start, at);
    attempt_record& record = s.result.records.emplace_back();
    record.number = s.core.attempts();
    record.wait_before = s.next_wait;
    record.wait_from = s.next_wait_source;
    record.start = at;
    record.allowance = allowance;
    s.result.attempts = record.number;
    if (s.options.observer) s.options.observer->attempt_started({s.options.operation, record.number, at, allowance});

    const duration deadline = s.core.policy().overall_deadline;
    const attempt_context<clock> context{
        record.number, saturating_instant(now, allowance), allowance,
        deadline == duration::max() ? duration::max() : deadline - at};
    std::optional<decltype(s.factory(context))> op;
    try {
      op.emplace(s.factory(context));
    } catch (...) {
      // The first attempt is created inside the initiating call, where the
      // caller's handler must not run: deliver the exception from the strand.
      s.pending_exception = std::current_exception();
      return boost::asio::post(s.strand, boost::asio::append(std::move(self), factory_threw{}));
    }
    run_attempt<T>(s.timer, context.deadline, s.options.cancellation_repeat, s.strand, std::move(*op),
                   boost::asio::bind_executor(s.strand, std::move(self)));
  }

  template <class Self>
  void sleep(Self& self, const decision& d) {
    state& s = *st_;
    s.next_wait = d.wait;
    s.next_wait_source = d.source;
    s.result.total_backoff += d.wait;
    if (s.options.observer)
      s.options.observer->backoff_scheduled({s.options.operation, s.core.attempts() + 1, elapsed(), d.wait, d.source});
    s.timer.expires_after(std::chrono::duration_cast<typename clock::duration>(d.wait));
    s.timer.async_wait(boost::asio::bind_executor(s.strand, std::move(self)));
  }

  template <class Self>
  void finish(Self& self, stop_reason reason) {
    state& s = *st_;
    s.result.reason = reason;
    s.result.attempts = s.core.attempts();
    s.result.elapsed = elapsed();
    if (s.options.observer)
      s.options.observer->stopped({s.options.operation, reason, s.result.attempts, s.result.elapsed, s.result.total_backoff});
    outcome<T> result = std::move(s.result);
    self.complete(std::exception_ptr(), std::move(result));
  }

  template <class Self>
  void fail(Self& self, std::exception_ptr e) {
    outcome<T> result = std::move(st_->result);
    self.complete(std::move(e), std::move(result));
  }

  std::unique_ptr<state> st_;
};

} // namespace coretry::detail

#endif
