#ifndef CORETRY_DETAIL_ATTEMPT_RUNNER_HPP
#define CORETRY_DETAIL_ATTEMPT_RUNNER_HPP

// Runs one attempt under a deadline that reaches the attempt's own I/O: the
// Boost 1.81 equivalent of cancel_after. The timer and the operation run side
// by side; when the timer fires first the operation receives *terminal*
// cancellation through its cancellation slot; the caller's cancellation is
// forwarded the same way. Until the operation finishes, the cancellation is
// repeated at an interval: an operation between two internal steps when the
// first signal came would otherwise wait forever on its next step (see
// retry_options::cancellation_repeat). It completes only once the operation has finished,
// so no work is ever left running behind it. The timer's own (cancelled) wait
// may still be queued then: it holds a reference to the runner's state, never
// to the caller, so the caller's next step need not wait a turn for it.

#include <coretry/attempt.hpp>
#include <coretry/stop_reason.hpp>

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/system/system_error.hpp>

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

template <class T, class Timer, class Handler>
class attempt_runner {
  using allocator_type = typename std::allocator_traits<boost::asio::associated_allocator_t<
      Handler, boost::asio::recycling_allocator<void>>>::template rebind_alloc<attempt_runner>;

public:
  template <class Executor, class Op>
  static void start(Timer& timer, typename Timer::time_point deadline, duration repeat, const Executor& ex,
                    Op&& op, Handler&& handler) {
    allocator_type alloc(boost::asio::get_associated_allocator(handler, boost::asio::recycling_allocator<void>()));
    attempt_runner* self = std::allocator_traits<allocator_type>::allocate(alloc, 1);
    ::new (self) attempt_runner(timer, repeat, std::move(handler), alloc);
    self->launch(deadline, ex, std::forward<Op>(op));
  }

private:
  attempt_runner(Timer& timer, duration repeat, Handler&& handler, const allocator_type& alloc)
      : handler_(std::move(handler)), timer_(timer), repeat_(repeat), alloc_(alloc) {}

  template <class Executor, class Op>
  void launch(typename Timer::time_point deadline, const Executor& ex, Op&& op) {
    caller_slot_ = boost::asio::get_associated_cancellation_slot(handler_);
    if (caller_slot_.is_connected()) {
      // Any cancellation the caller sends becomes terminal for the attempt:
      // the attempt is abandoned, so its I/O must stop and may not be reused.
      caller_slot_.assign([this, ex](boost::asio::cancellation_type) {
        if (op_done_ || cancelled_) return;
        cancel_operation();
        // The deadline's wait gives way to the repeat (its aborted wait only
        // drops its reference).
        if (repeat_ > duration::zero()) {
          timer_.expires_after(repeat_);
          wait(ex);
        }
      });
    }

    auto on_done = boost::asio::bind_cancellation_slot(
        signal_.slot(), boost::asio::bind_executor(ex, [this](auto first, auto&&... rest) {
          on_operation(to_completion(std::move(first), std::forward<decltype(rest)>(rest)...));
        }));
    std::exception_ptr thrown_after_completing;
    try {
      if constexpr (is_awaitable_v<std::decay_t<Op>>)
        boost::asio::co_spawn(ex, std::forward<Op>(op), std::move(on_done));
      else
        std::forward<Op>(op)(std::move(on_done));
    } catch (...) {
      if (op_done_) {
        // The operation completed, then threw: its result stands, and the
        // exception goes on as any handler's would, once this is settled.
        thrown_after_completing = std::current_exception();
      } else {
        // Starting the operation threw: nothing runs, nothing to wait for.
        result_.exception = std::current_exception();
        op_done_ = true;
      }
    }
    launching_ = false;
    if (op_done_) {
      // Completed (or threw) inside its initiating call: the caller hears of
      // it from the executor, never inside this call, and no deadline is set.
      boost::asio::post(ex, [this] { complete(); });
    } else {
      timer_.expires_at(deadline);
      wait(ex);
    }
    release(); // launch's own reference
    if (thrown_after_completing) std::rethrow_exception(thrown_after_completing);
  }

  // One wait of the timer: first for the deadline, then for each repeat of
  // the cancellation while the operation is still winding down.
  template <class Executor>
  void wait(const Executor& ex) {
    ++references_;
    timer_.async_wait(boost::asio::bind_executor(ex, [this, ex](boost::system::error_code ec) {
      if (!ec && !op_done_) {
        if (!cancelled_) timed_out_ = true;
        cancel_operation();
        if (repeat_ > duration::zero()) {
          timer_.expires_after(repeat_);
          wait(ex);
        }
      }
      release();
    }));
  }

  void cancel_operation() {
    cancelled_ = true;
    signal_.emit(boost::asio::cancellation_type::terminal);
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

  void on_operation(attempt_completion<T>&& c) {
    op_done_ = true;
    result_ = std::move(c);
    if (launching_) return; // launch completes it
    // A result that arrives after the deadline fired is a timeout: success
    // means complete within the attempt's allowance.
    if (timed_out_ && !result_.exception) result_.error = attempt_error::timed_out;
    timer_.cancel();
    complete();
  }

  void complete() {
    if (caller_slot_.is_connected()) caller_slot_.clear();
    Handler handler(std::move(handler_));
    attempt_completion<T> result(std::move(result_));
    release();
    std::move(handler)(std::move(result));
  }

  void release() {
    if (--references_ > 0) return;
    allocator_type alloc(alloc_);
    this->~attempt_runner();
    std::allocator_traits<allocator_type>::deallocate(alloc, this, 1);
  }

  Handler handler_;
  Timer& timer_;
  duration repeat_;
  boost::asio::cancellation_signal signal_;
  boost::asio::cancellation_slot caller_slot_;
  allocator_type alloc_;
  attempt_completion<T> result_;
  int references_ = 2; // launch and the operation's completion, plus one per pending timer wait
  bool launching_ = true; ///< inside launch, starting the operation
  bool op_done_ = false;
  bool cancelled_ = false; ///< terminal cancellation was sent at least once
  bool timed_out_ = false;
};

/// Starts `op` with a deadline on `timer`'s clock, repeating the cancellation
/// every `cancellation_repeat` until it finishes (zero: once); `handler` receives an
/// attempt_completion<T> on `ex` once the operation has finished. The
/// deadline is an instant, not a duration, so that time spent between the
/// decision to start and the start itself is not handed out twice.
template <class T, class Timer, class Executor, class Op, class Handler>
void run_attempt(Timer& timer, typename Timer::time_point deadline, duration cancellation_repeat, const Executor& ex,
                 Op&& op, Handler&& handler) {
  attempt_runner<T, Timer, std::decay_t<Handler>>::start(timer, deadline, cancellation_repeat, ex,
                                                         std::forward<Op>(op), std::forward<Handler>(handler));
}

} // namespace coretry::detail

#endif
