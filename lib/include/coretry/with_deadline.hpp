#ifndef CORETRY_WITH_DEADLINE_HPP
#define CORETRY_WITH_DEADLINE_HPP

/// @file
/// One asynchronous operation under a deadline that reaches the operation's
/// own I/O: the deadline is delivered to the operation as terminal
/// cancellation, and the caller hears back only once the operation has
/// finished. The same runner bounds each attempt of async_retry.

#include <coretry/async_retry.hpp>
#include <coretry/detail/attempt_runner.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/asio/steady_timer.hpp>

#include <memory>
#include <utility>

namespace coretry {

/// What async_with_deadline completes with.
///
/// - `exception`: set only when the operation threw something other than a
///   `boost::system::system_error` (a programming error); it is not
///   rethrown for the caller.
/// - `error`: the operation's own error (a `system_error` thrown by an
///   awaitable becomes its code), or `coretry::attempt_error::timed_out`
///   when the deadline expired before the operation completed, whatever
///   the operation then reported.
/// - `value`: the operation's result when it produced one (an awaitable
///   that threw a `system_error` leaves a default-constructed value), kept
///   even after a timeout so that a caller may inspect
///   what the operation had when it was cut off.
template <class T>
using deadline_outcome = detail::attempt_completion<T>;

/// `at + d`, or the last instant of `at`'s clock when that would overflow:
/// a deadline "never" given as a duration stays representable.
template <class TimePoint, class Duration>
TimePoint instant_after(TimePoint at, Duration d) {
  return detail::saturating_instant(at, d);
}

/// Runs one asynchronous operation under a deadline.
///
/// @tparam T      What the operation produces (its completion's value after
///                the error or exception_ptr).
/// @tparam Timer  The timer type the deadline is kept with
///                (`boost::asio::steady_timer` by default;
///                `coretry::testing::manual_timer` for virtual time). The
///                deadline goes into the execution context's deadline queue,
///                which keeps every such deadline of the context on one
///                timer of this type: adding or removing one costs no system
///                call unless it becomes the context's earliest. Callers
///                name a type, never hand over a timer object.
/// @param ex       An I/O executor of the execution context whose deadline
///                queue is used, and the handler's executor when it has none
///                of its own. The operation is started, and its steps run,
///                on the handler's executor when that is serial (a strand,
///                or a single-threaded io_context) and of the same
///                execution context as `ex`; otherwise on a strand of `ex`
///                made for the call (`ex` itself when it is serial). An
///                awaitable is spawned there.
/// @param deadline The instant, on `Timer`'s clock, at which the operation
///                is cut off. An instant already past cuts it off as soon as
///                it has been started (it is still started). Use
///                instant_after to make one from a duration.
/// @param op       Either an `boost::asio::awaitable<T>` (it is spawned on
///                `ex`) or a callable taking a completion handler whose
///                signature is `void(boost::system::error_code, T)` or
///                `void(std::exception_ptr, T)`. The operation must honour
///                terminal cancellation through the handler's cancellation
///                slot.
/// @param token    A completion token for the signature
///                `void(coretry::deadline_outcome<T>)`.
///
/// **Deadline.** When the deadline passes first, the operation receives
/// terminal cancellation. While it has not finished, the cancellation is
/// sent again every coretry::default_cancellation_repeat (an operation
/// between two internal steps when the first signal came would otherwise
/// miss it), a bounded number of times; after that it is waited for without
/// a timer. To the caller a timeout is `outcome.error ==
/// coretry::attempt_error::timed_out`.
///
/// **Completion.** The handler runs only after the operation has completed,
/// never inside this call, exactly once, and through its associated
/// executor (`ex` when it has none), on which work is counted until then:
/// nothing the operation started is left running behind it. Safe on any
/// executor, a multi-threaded io_context's included. A handler that throws
/// lets the exception out of the `run()` (or `poll()`) that called it, as
/// Asio's own operations do; the operation is over by then.
///
/// **Destruction.** An io_context destroyed while the operation is pending
/// (that of `ex`; the operation runs there) destroys the operation and the
/// handler unrun. A handler bound to another execution context is posted
/// there once the operation is over, holding the outcome and nothing else.
///
/// **Cancellation.** The handler's associated cancellation slot is honoured
/// for terminal and partial cancellation; either is forwarded to the
/// operation as *terminal* cancellation (the operation is abandoned, so its
/// I/O must stop), from the operation's own executor. The outcome then
/// carries the operation's own error (typically
/// `boost::asio::error::operation_aborted`), not `timed_out`, unless the
/// deadline had already passed. Total cancellation is ignored. As with any
/// Asio operation, the emission must not race the completion: emit from the
/// handler's executor when that is serial (a strand), or otherwise make sure
/// the handler has not run yet.
template <class T, class Timer = boost::asio::steady_timer, class Executor, class Op, class CompletionToken>
auto async_with_deadline(const Executor& ex, typename Timer::time_point deadline, Op&& op, CompletionToken&& token) {
  return boost::asio::async_initiate<CompletionToken, void(deadline_outcome<T>)>(
      [](auto handler, const Executor& io, typename Timer::time_point at, auto operation) {
        // The runner's steps run one at a time on the handler's executor
        // when that is serial and of `io`'s context, else on a strand of
        // `io`: on a multi-threaded io_context the operation's completion,
        // its deadline and the caller's cancellation would otherwise race.
        const auto strand =
            detail::make_operation_strand(boost::asio::get_associated_executor(handler, io), io);
        auto& queue = detail::deadline_queue_of<Timer>(io);
        // The runner listens to the caller's slot from here, the caller's
        // thread (where it may emit; a slot must not be touched from two
        // threads at once). The operation starts on the strand: at once
        // when the caller runs there already, else queued there. Started
        // from another thread, it could complete while this call was still
        // arming its deadline. The start allocates like the handler.
        const auto alloc = boost::asio::get_associated_allocator(handler, boost::asio::recycling_allocator<void>());
        using runner = detail::attempt_runner<T, Timer, decltype(handler)>;
        auto created = runner::create(queue, default_cancellation_repeat, detail::default_cancellation_repeats,
                                      detail::stuck_report{}, strand, std::move(handler));
        boost::asio::dispatch(strand, boost::asio::bind_allocator(alloc, [at, operation = std::move(operation),
                                                                          r = std::move(created)]() mutable {
                                r->launch(at, std::move(operation));
                                r.done(true);
                              }));
      },
      token, ex, deadline, std::forward<Op>(op));
}

} // namespace coretry

#endif
