#ifndef CORETRY_DETAIL_ATTEMPT_RUNNER_HPP
#define CORETRY_DETAIL_ATTEMPT_RUNNER_HPP

// Runs one attempt under a deadline that reaches the attempt's own I/O: the
// Boost 1.81 equivalent of cancel_after. The timer and the operation run side
// by side; when the timer fires first the operation receives *terminal*
// cancellation through its cancellation slot; the caller's cancellation is
// forwarded the same way. Until the operation finishes, the cancellation is
// repeated at an interval (an operation between two internal steps when the
// first signal came would otherwise wait forever on its next step), up to a
// bound: past it the runner stops repeating, reports the attempt as stuck and
// waits for it without a timer. It completes only once the operation has
// finished, so no work is ever left running behind it.
//
// The deadline and its repeats are entries in the execution context's
// deadline_queue (one timer for every attempt of the context), not a timer
// of the runner's own: arming one costs no system call unless it is the
// context's new earliest deadline.
//
// Ownership: the runner lives in memory from the handler's associated
// allocator and is owned by the handlers it has outstanding (the operation's
// completion handler, its queued deadline, a posted completion), each holding
// a counted reference. When the last one goes (run, or destroyed unrun by a
// destroyed io_context) the runner is freed, and with it the caller's handler:
// nothing is kept alive by a raw pointer. A completion that arrives while the
// runner is itself calling out (starting the operation, emitting a
// cancellation) is never acted on inside that call: it is taken up once the
// call has returned, or posted.
//
// Threads: every step of the runner (its start, the operation's completion,
// each expiry, the caller's cancellation) runs on its executor, which is
// serial (make_operation_strand), so its state is never touched from two
// threads at once. The caller's handler is called in place when its
// associated executor is that same executor, else dispatched to its own
// executor, where work is counted until then.

#include <coretry/attempt.hpp>
#include <coretry/detail/block_cache.hpp>
#include <coretry/detail/caller_link.hpp>
#include <coretry/detail/counted_ref.hpp>
#include <coretry/detail/deadline_queue.hpp>
#include <coretry/detail/operation_executor.hpp>
#include <coretry/stop_reason.hpp>

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/system/system_error.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>

namespace coretry::detail {

/// `at + d`, or the clock's last instant when that would overflow (an
/// attempt without a limit of its own under an operation without a deadline).
template <class TimePoint, class Duration>
TimePoint saturating_instant(TimePoint at, Duration d) {
  if (d >= std::chrono::duration_cast<Duration>(TimePoint::max() - at)) return TimePoint::max();
  return at + std::chrono::duration_cast<typename TimePoint::duration>(d);
}

template <class T>
struct attempt_completion {
  std::exception_ptr exception; ///< a programming error thrown by user code: it propagates
  boost::system::error_code error;
  std::optional<T> value;
};

template <class>
inline constexpr bool is_awaitable_v = false;
template <class T, class E>
inline constexpr bool is_awaitable_v<boost::asio::awaitable<T, E>> = true;

/// How a stuck attempt is reported: a function and its context, called once
/// when the runner stops repeating the cancellation of an unfinished attempt.
struct stuck_report {
  void (*report)(void*) = nullptr;
  void* context = nullptr;
};

/// Default bound on repeats for run_attempt's users that set none.
inline constexpr unsigned default_cancellation_repeats = 100;

template <class T, class Timer, class Handler>
class attempt_runner {
  using handler_allocator = boost::asio::associated_allocator_t<Handler, boost::asio::recycling_allocator<void>>;
  using handler_executor = boost::asio::associated_executor_t<Handler, boost::asio::any_io_executor>;
  // Its own block: from block_cache unless the handler names an allocator
  // (a template, so that it is looked at once the class is complete).
  template <class Self = attempt_runner>
  using own_allocator = block_allocator_for<handler_allocator, Self>;
  using ref = counted_ref<attempt_runner>;
  friend class counted_ref<attempt_runner>;
  friend struct owned_handler<attempt_runner>;
  friend class caller_link_handler<attempt_runner>;

public:
  using time_point = typename Timer::time_point;
  using queue_type = deadline_queue<Timer>;
  using allocator_type = handler_allocator;

  /// `ex` must be serial (a strand, or a single-threaded io_context's
  /// executor) and the call must run on it: every step of the runner runs
  /// there, one at a time.
  template <class Op>
  static void start(queue_type& queue, time_point deadline, duration repeat, unsigned max_repeats,
                    stuck_report stuck, const boost::asio::any_io_executor& ex, Op&& op, Handler&& handler) {
    ref runner = create(queue, repeat, max_repeats, stuck, ex, std::move(handler));
    runner->launch(deadline, std::forward<Op>(op));
    runner.done(true); // never calls the handler in place
  }

  /// A runner that holds `handler` and listens to its cancellation slot,
  /// from the thread that calls (the caller's: where it may emit), but has
  /// not started its operation: launch() does that, on `ex`. A request that
  /// comes in between is acted on as the operation starts.
  static ref create(queue_type& queue, duration repeat, unsigned max_repeats, stuck_report stuck,
                    const boost::asio::any_io_executor& ex, Handler&& handler) {
    const handler_allocator handler_alloc(
        boost::asio::get_associated_allocator(handler, boost::asio::recycling_allocator<void>()));
    own_allocator<> alloc(handler_alloc);
    attempt_runner* self = std::allocator_traits<own_allocator<>>::allocate(alloc, 1);
    try {
      ::new (self) attempt_runner(queue, repeat, max_repeats, stuck, ex, std::move(handler), handler_alloc);
    } catch (...) {
      std::allocator_traits<own_allocator<>>::deallocate(alloc, self, 1);
      throw;
    }
    ref r(self);
    self->caller_.attach(boost::asio::get_associated_cancellation_slot(self->handler_), self);
    return r;
  }

  /// Starts the operation with its deadline; on the runner's executor.
  template <class Op>
  void launch(time_point deadline, Op&& op) {
    ref self(this); // launch's own reference: never calls the handler in place,
                    // since the initiating call must never complete the caller
    launched_ = true;
    std::exception_ptr thrown_after_completing;
    ++callout_;
    try {
      if constexpr (is_awaitable_v<std::decay_t<Op>>)
        boost::asio::co_spawn(executor_, std::forward<Op>(op), owned_handler<attempt_runner>{ref(this)});
      else
        std::forward<Op>(op)(owned_handler<attempt_runner>{ref(this)});
    } catch (...) {
      if (op_done_) {
        // The operation completed, then threw: its result stands, and the
        // exception goes on as any handler's would, once this is settled.
        thrown_after_completing = std::current_exception();
      } else {
        // Starting the operation threw. Whether it started something first
        // cannot be known: its handler, if it ever runs, is ignored (it holds
        // its own reference, so nothing it touches is freed).
        result_.exception = std::current_exception();
        op_done_ = true;
      }
    }
    --callout_;
    // The caller cancelled before the start: the operation hears of it now.
    if (caller_cancelled_ && !op_done_) cancel_operation();
    if (op_done_) {
      // Completed (or threw) inside its initiating call: the caller hears of
      // it from the executor, never inside this call, and no deadline is set.
      post_completion();
    } else if (caller_cancelled_ && repeat_ > duration::zero()) {
      arm_repeat();
    } else {
      arm(deadline);
    }
    self.done(true);
    if (thrown_after_completing) std::rethrow_exception(thrown_after_completing);
  }

private:
  attempt_runner(queue_type& queue, duration repeat, unsigned max_repeats, stuck_report stuck,
                 const boost::asio::any_io_executor& ex, Handler&& handler, const handler_allocator& alloc)
      : handler_(std::move(handler)), queue_(queue), repeat_(repeat), max_repeats_(max_repeats), stuck_(stuck),
        executor_(ex), alloc_(alloc) {
    deadline_.owner = this;
    static constexpr typename deadline_entry<time_point>::callbacks on{&on_expired, &on_abandoned};
    deadline_.on = &on;
    // A handler whose executor is the runner's own is called in place (the
    // runner's steps run there); any other is dispatched to its executor,
    // on which work is counted until then.
    if constexpr (requires { handler_.owners_executor(); })
      if (&handler_.owners_executor() == &ex) return; // the very executor given: no copy, no comparison
    const handler_executor handler_ex = boost::asio::get_associated_executor(handler_, executor_);
    if constexpr (std::is_convertible_v<handler_executor, boost::asio::any_io_executor>)
      if (static_cast<const boost::asio::any_io_executor&>(handler_ex) == executor_) return; // no copy of one
    work_.emplace(handler_ex);
  }

  ~attempt_runner() {
    // Destroyed unrun (the io_context went away mid-attempt), perhaps on
    // another thread than the caller's: the handler in the caller's slot
    // must never reach here again, and the slot is not touched from here.
    caller_.detach();
  }

  // What owned_handler asks of its owner.
  const boost::asio::any_io_executor& executor() const noexcept { return executor_; }
  boost::asio::cancellation_slot inner_slot(std::size_t) noexcept { return signal_.slot(); }
  const handler_allocator& allocator() const noexcept { return alloc_; }

  void add_ref() noexcept { references_.add(); }
  // A reference for an emission of the caller's, unless it is already being freed.
  bool try_add_ref() noexcept { return references_.try_add(); }
  // The last reference frees the runner, then (when it was given back by a
  // handler that ran, and the attempt is over) calls the caller's handler:
  // no handler of the runner is left anywhere when the caller goes on. A
  // handler that throws throws out of here, to whoever ran the last one.
  // `post`: never call the handler in place (launch's reference).
  void release(bool ran, bool post = false) {
    if (!references_.drop()) return;
    own_allocator<> alloc(alloc_);
    // The handler goes last, after the runner's block is freed with an
    // allocator copied from it (which may refer to memory it owns).
    Handler handler(std::move(handler_));
    if (!ran || !completed_) {
      this->~attempt_runner();
      std::allocator_traits<own_allocator<>>::deallocate(alloc, this, 1);
      return;
    }
    attempt_completion<T> result(std::move(result_));
    std::optional<handler_work<handler_executor>> work(std::move(work_));
    this->~attempt_runner();
    std::allocator_traits<own_allocator<>>::deallocate(alloc, this, 1);
    if (!work) {
      // On the handler's own executor already: in place, or posted there.
      if (post)
        boost::asio::post(boost::asio::append(std::move(handler), std::move(result)));
      else
        std::move(handler)(std::move(result));
      return;
    }
    auto completion =
        boost::asio::bind_executor(work->executor(), boost::asio::append(std::move(handler), std::move(result)));
    if (post)
      boost::asio::post(std::move(completion));
    else
      boost::asio::dispatch(std::move(completion));
  }

  // The caller's emission (caller_link), on the caller's executor. Any
  // cancellation the caller sends becomes terminal for the attempt: the
  // attempt is abandoned, so its I/O must stop and may not be reused. It is
  // acted on from the runner's executor, whatever thread the caller emits from.
  bool accept_caller_cancellation(boost::asio::cancellation_type type) noexcept {
    if (!(type & (boost::asio::cancellation_type::terminal | boost::asio::cancellation_type::partial))) return false;
    return try_add_ref();
  }
  void act_on_caller_cancellation() {
    boost::asio::post(executor_, boost::asio::bind_allocator(alloc_, [self = ref::adopt(this)]() mutable {
                        self->on_caller_cancel();
                        self.done();
                      }));
  }

  void on_caller_cancel() {
    if (op_done_ || completed_ || cancelled_ || caller_cancelled_) return;
    caller_cancelled_ = true;
    if (!launched_) return; // launch() sends it
    cancel_operation();
    if (op_done_) return complete(); // it finished inside the emission
    arm_repeat();
  }

  // Queues the deadline: first the attempt's, then each repeat of the
  // cancellation while the operation is still winding down. The queued
  // entry holds a reference of its own.
  void arm(time_point at) {
    const unsigned generation = ++generation_;
    add_ref();
    // Moved (queued already, so it keeps the reference it had) or refused
    // (the context has shut down): the new reference is not needed.
    if (queue_.place(deadline_, at, generation) != queue_type::placed::added) release(true);
  }

  // Takes the deadline out of the queue if it is still there (no system
  // call), giving its reference back; the caller holds one of its own.
  void disarm() {
    if (queue_.remove(deadline_)) release(true);
  }

  // From the queue, outside its lock, on whichever thread runs its timer:
  // the deadline's reference goes with the expiry to the runner's executor.
  static void on_expired(void* owner, unsigned generation) {
    auto* self = static_cast<attempt_runner*>(owner);
    boost::asio::post(self->executor_, boost::asio::bind_allocator(self->alloc_, [self = ref::adopt(self),
                                                                                  generation]() mutable {
                        self->on_timer(generation);
                        self.done();
                      }));
  }

  // The execution context shuts down with the deadline queued.
  static void on_abandoned(void* owner) { static_cast<attempt_runner*>(owner)->release(false); }

  void on_timer(unsigned generation) {
    // A deadline that was replaced, or that expired after the end.
    if (generation != generation_ || op_done_ || completed_) return;
    if (cancelled_ && repeats_ >= max_repeats_) {
      // The operation ignores its cancellation: stop repeating it, say so,
      // and wait for it without a timer (it may still touch its state).
      stuck_reported_ = true;
      if (stuck_.report) stuck_.report(stuck_.context);
      return;
    }
    if (!cancelled_) timed_out_ = true;
    else ++repeats_;
    cancel_operation();
    if (op_done_) return complete(); // it finished inside the emission
    arm_repeat();
  }

  void arm_repeat() {
    if (repeat_ <= duration::zero()) return; // the deadline (if still queued) stays
    arm(saturating_instant(queue_.now(), repeat_));
  }

  void cancel_operation() {
    cancelled_ = true;
    ++callout_;
    signal_.emit(boost::asio::cancellation_type::terminal);
    --callout_;
  }

  template <class First, class... Rest>
  static attempt_completion<T> to_completion(First first, Rest&&... rest) {
    attempt_completion<T> c;
    if constexpr (std::is_same_v<First, std::exception_ptr>) {
      if (first) {
        // A system_error is how an awaitable reports an I/O failure: it is the
        // attempt's error. Anything else is a programming error.
        try {
          std::rethrow_exception(first);
        } catch (const boost::system::system_error& e) {
          c.error = e.code();
        } catch (...) {
          c.exception = std::current_exception();
        }
      }
    } else {
      c.error = first;
    }
    if constexpr (sizeof...(Rest) == 0)
      c.value.emplace();
    else
      c.value.emplace(std::forward<Rest>(rest)...);
    return c;
  }

  // The operation's completion, through owned_handler, on the executor.
  template <class First, class... Rest>
  void on_completion(std::size_t, First first, Rest&&... rest) {
    if (op_done_) return; // a start that threw already ended this attempt
    op_done_ = true;
    result_ = to_completion(std::move(first), std::forward<Rest>(rest)...);
    if (callout_ > 0) return; // whoever is calling out takes it up afterwards
    complete();
  }

  void post_completion() {
    boost::asio::post(executor_, boost::asio::bind_allocator(alloc_, [self = ref(this)]() mutable {
                        self->complete();
                        self.done();
                      }));
  }

  void complete() {
    if (completed_) return;
    completed_ = true;
    // A result that arrives after the deadline fired is a timeout: success
    // means complete within the attempt's allowance.
    if (timed_out_ && !result_.exception) result_.error = attempt_error::timed_out;
    ++generation_; // an expiry already on its way is stale
    disarm();
    // The caller emits from its handler's executor: the slot is cleared
    // from here only when that is this executor.
    if (work_) caller_.detach();
    else caller_.detach_and_clear();
    // The caller's handler is called by the last reference to go, once the
    // cancelled wait (if any) has come back: see release.
  }

  Handler handler_;
  std::optional<handler_work<handler_executor>> work_; ///< unless the handler runs on executor_
  queue_type& queue_;
  deadline_entry<time_point> deadline_;
  duration repeat_;
  unsigned max_repeats_;
  stuck_report stuck_;
  boost::asio::any_io_executor executor_; ///< serial: the runner's steps run here
  boost::asio::cancellation_signal signal_;
  caller_link<attempt_runner> caller_; ///< the handler in the caller's cancellation slot
  [[no_unique_address]] handler_allocator alloc_; ///< the allocator of its handlers
  attempt_completion<T> result_;
  reference_count references_;
  unsigned generation_ = 0; ///< of the deadline queued last
  unsigned repeats_ = 0;    ///< cancellations sent again after the first
  int callout_ = 0;         ///< inside a call that may complete the operation
  bool op_done_ = false;
  bool completed_ = false;
  bool cancelled_ = false; ///< terminal cancellation was sent at least once
  bool caller_cancelled_ = false;
  bool launched_ = false; ///< the operation has been started
  bool timed_out_ = false;
  bool stuck_reported_ = false;
};

/// Starts `op` with a deadline in `queue` (on its timer's clock), repeating the cancellation
/// every `cancellation_repeat` (zero: once) at most `max_repeats` times, then
/// calling `stuck` and waiting without a timer; `handler` receives an
/// attempt_completion<T> through its associated executor once the operation
/// has finished. `ex` is serial and the call runs on it (make_operation_strand).
/// The deadline is an instant, not a duration, so that time spent between the
/// decision to start and the start itself is not handed out twice.
template <class T, class Timer, class Op, class Handler>
void run_attempt(deadline_queue<Timer>& queue, typename Timer::time_point deadline, duration cancellation_repeat,
                 unsigned max_repeats, stuck_report stuck, const boost::asio::any_io_executor& ex, Op&& op,
                 Handler&& handler) {
  attempt_runner<T, Timer, std::decay_t<Handler>>::start(queue, deadline, cancellation_repeat, max_repeats, stuck,
                                                         ex, std::forward<Op>(op), std::forward<Handler>(handler));
}

/// run_attempt with the default bound on repeats and no stuck report.
template <class T, class Timer, class Op, class Handler>
void run_attempt(deadline_queue<Timer>& queue, typename Timer::time_point deadline, duration cancellation_repeat,
                 const boost::asio::any_io_executor& ex, Op&& op, Handler&& handler) {
  run_attempt<T>(queue, deadline, cancellation_repeat, default_cancellation_repeats, stuck_report{}, ex,
                 std::forward<Op>(op), std::forward<Handler>(handler));
}

} // namespace coretry::detail

#endif
