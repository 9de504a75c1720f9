#ifndef CORETRY_ASYNC_RETRY_HPP
#define CORETRY_ASYNC_RETRY_HPP

#include <coretry/attempt.hpp>
#include <coretry/budget.hpp>
#include <coretry/classify.hpp>
#include <coretry/decision_core.hpp>
#include <coretry/observer.hpp>
#include <coretry/outcome.hpp>
#include <coretry/policy.hpp>
#include <coretry/random.hpp>

#include <boost/asio/steady_timer.hpp>

#include <exception>
#include <string_view>

namespace coretry {

/// How often a cancelled attempt that has not finished is told again.
inline constexpr duration default_cancellation_repeat = std::chrono::milliseconds(10);

/// Everything about an operation that is not its timing policy.
struct retry_options {
  /// Whether the operation may be repeated after an ambiguous failure (a
  /// timeout after sending). Unsafe by default: a read says it is idempotent.
  repeat_safety safety = repeat_safety::unsafe;
  /// Shared retry budget (thread-safe); null means retries are bounded by the policy alone.
  retry_budget* budget = nullptr;
  /// Receives the operation's events; null means none.
  retry_observer* observer = nullptr;
  /// Jitter draws; null means the process-wide independent_random.
  random_source* random = nullptr;
  /// Bounded name for events (a route template, never a URL with a query).
  /// Must outlive the operation; a string literal does.
  std::string_view operation = "operation";
  /// While a cancelled attempt has not finished, its terminal cancellation is
  /// sent again at this interval. Composed operations that start their next
  /// step without checking for cancellation (Beast's HTTP reads in Boost
  /// 1.81) miss a signal that arrives between two steps; repeating it bounds
  /// how long such an attempt can outlive its deadline. Zero: sent once.
  duration cancellation_repeat = default_cancellation_repeat;
};

/// Completion signature of async_retry for attempts producing T. The
/// exception_ptr is set only when user code (the factory, an attempt, the
/// classifier) threw something other than an I/O error: programming errors
/// propagate to the caller, they are never retried. Every other ending,
/// success or not, is described by the outcome.
template <class T>
using retry_signature = void(std::exception_ptr, outcome<T>);

} // namespace coretry

#include <coretry/impl/async_retry.hpp>

namespace coretry {

/// Retries an asynchronous operation under `p`.
///
/// `factory(const attempt_context<Clock>&)` creates each attempt: an
/// `asio::awaitable<T>` or a deferred operation (`something.async_x(...,
/// asio::deferred)`) completing with void(error_code[, T]) or
/// void(exception_ptr[, T]). `classify(error_code, const T&)` turns each
/// attempt's result into a verdict. Each attempt runs under min(attempt limit,
/// remaining overall time - reserve); when that expires the attempt's
/// operations receive terminal cancellation through their cancellation slot,
/// and the retry waits for them to finish before going on. Between attempts
/// the operation holds nothing but its timer.
///
/// Completion: `void(std::exception_ptr, coretry::outcome<T>)`; works with
/// use_awaitable, deferred, use_future and callbacks.
///
/// Per-operation cancellation: terminal and partial. Either cancels the
/// current attempt (as terminal cancellation of its operations) or sleep,
/// and completes with stop_reason::cancelled unless the attempt succeeded.
///
/// The operation's steps run on a strand: the executor associated with the
/// completion handler when that is a strand (a coroutine on a strand, a
/// handler bound with bind_executor to one), else `ex` when it is a strand,
/// otherwise a new strand of `ex`.
/// So it is safe on a multi-threaded io_context; emit cancellation from the
/// handler's strand.
///
/// Throws std::invalid_argument, before starting, if the policy is invalid.
template <class Timer = boost::asio::steady_timer, class Executor, class Factory, class Classifier,
          class CompletionToken>
auto async_retry(const Executor& ex, const policy& p, const retry_options& options, Factory&& factory,
                 Classifier&& classify, CompletionToken&& token) {
  using clock = typename Timer::clock_type;
  using op_type = std::invoke_result_t<std::decay_t<Factory>&, const attempt_context<clock>&>;
  using value_type = detail::attempt_value_t<op_type>;
  using operation = detail::retry_operation<Timer, boost::asio::any_io_executor, std::decay_t<Factory>,
                                            std::decay_t<Classifier>, value_type>;
  // The state is made (and the policy checked) now, so that a bad policy
  // throws from this call whatever the token; the strand is chosen when the
  // operation is launched, from the handler it will complete to.
  auto state = operation::make_state(ex, p, options, std::forward<Factory>(factory),
                                     std::forward<Classifier>(classify));
  return boost::asio::async_initiate<CompletionToken, retry_signature<value_type>>(
      [ex](auto handler, auto state) {
        state->strand = detail::make_operation_strand(boost::asio::get_associated_executor(handler, ex), ex);
        auto strand = state->strand;
        boost::asio::async_compose<decltype(handler), retry_signature<value_type>>(operation{std::move(state)},
                                                                                   handler, strand);
      },
      token, std::move(state));
}

/// async_retry with the default options (unsafe to repeat after an ambiguous failure).
template <class Timer = boost::asio::steady_timer, class Executor, class Factory, class CompletionToken>
  requires(!std::is_same_v<std::decay_t<Factory>, retry_options>)
auto async_retry(const Executor& ex, const policy& p, Factory&& factory, CompletionToken&& token) {
  return async_retry<Timer>(ex, p, retry_options{}, std::forward<Factory>(factory), default_classifier{},
                            std::forward<CompletionToken>(token));
}

/// async_retry with the default classifier (error codes; nested outcomes).
template <class Timer = boost::asio::steady_timer, class Executor, class Factory, class CompletionToken>
auto async_retry(const Executor& ex, const policy& p, const retry_options& options, Factory&& factory,
                 CompletionToken&& token) {
  return async_retry<Timer>(ex, p, options, std::forward<Factory>(factory), default_classifier{},
                            std::forward<CompletionToken>(token));
}

} // namespace coretry

#endif
