#ifndef CORETRY_ASYNC_RETRY_HPP
#define CORETRY_ASYNC_RETRY_HPP

#include <coretry/attempt.hpp>
#include <coretry/budget.hpp>
#include <coretry/classify.hpp>
#include <coretry/concurrency_limit.hpp>
#include <coretry/decision_core.hpp>
#include <coretry/gate.hpp>
#include <coretry/latency_tracker.hpp>
#include <coretry/observer.hpp>
#include <coretry/outcome.hpp>
#include <coretry/policy.hpp>
#include <coretry/random.hpp>
#include <coretry/retry_options.hpp>

#include <boost/asio/steady_timer.hpp>

#include <exception>
#include <optional>
#include <string>
#include <stdexcept>
#include <type_traits>
#include <string_view>

namespace coretry {

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

namespace detail {

template <class Timer, class Factory>
using retry_value_t = attempt_value_t<
    std::invoke_result_t<std::decay_t<Factory>&, const attempt_context<typename Timer::clock_type>&>>;

/// The executor's default completion token (as_default_on), else deferred,
/// as Asio itself does from Boost 1.86 on (1.81's default is void: none).
template <class Executor>
using default_token_t =
    std::conditional_t<std::is_void_v<boost::asio::default_completion_token_t<Executor>>, boost::asio::deferred_t,
                       boost::asio::default_completion_token_t<Executor>>;

} // namespace detail

/// A classifier for attempts of `Factory` on `Timer`: callable as
/// `classify(const error_code&, const T&)` returning a verdict. A completion
/// token is never one, so a token in a classifier's place is not taken for it.
template <class Classifier, class Timer, class Factory>
concept retry_classifier =
    std::is_invocable_r_v<verdict, std::decay_t<Classifier>&, const boost::system::error_code&,
                          const detail::retry_value_t<Timer, Factory>&>;

/// Retries an asynchronous operation under `p`.
///
/// `factory(const attempt_context<Clock>&)` creates each attempt: an
/// `asio::awaitable<T>` or a deferred operation (`something.async_x(...,
/// asio::deferred)`, or a sequence of them joined with `|`) completing with
/// void(error_code[, T]) or void(exception_ptr[, T]). `classify(error_code,
/// const T&)` turns each attempt's result into a verdict. Each attempt runs
/// under min(attempt limit, remaining overall time - reserve); when that
/// expires the attempt's operations receive terminal cancellation through
/// their cancellation slot, and the retry waits for them to finish before
/// going on. Between attempts the operation holds nothing but its timer.
///
/// \par Handler signature
/// `void(std::exception_ptr, coretry::outcome<T>)`. The exception_ptr is set
/// only when user code (the factory, an attempt, the classifier) threw
/// something other than an I/O error; every other ending is in the outcome.
/// Any completion token works: use_awaitable, deferred, use_future,
/// as_tuple, callbacks, parallel_group. The default token is the executor's
/// default completion token, or `deferred` when it has none (a plain
/// executor in Boost 1.81), as Asio's own operations do from Boost 1.86 on.
///
/// \par Executor
/// The handler is invoked through its associated executor (`ex` when it has
/// none), never inside this call, and work is counted on that executor while
/// the operation is pending. The operation's own steps run on a strand: the
/// handler's associated executor when that is serial (a strand, or a
/// single-threaded io_context), else `ex` when it is, otherwise a new strand
/// of `ex`. The operation's memory comes from the handler's associated
/// allocator (a recycling allocator when it has none) and is freed before
/// the handler is invoked; a destroyed io_context destroys it, and the
/// handler with it, unrun.
///
/// \par Per-operation cancellation
/// Terminal and partial: either cancels the current backoff sleep, or the
/// current attempt as **terminal** cancellation of its operations (the
/// attempt is abandoned; its I/O must stop and its connection may not be
/// reused), and the operation completes with stop_reason::cancelled unless
/// that attempt succeeded. A cancellation requested before the first attempt
/// starts means no attempt starts. `total` is not supported: an emission of
/// `total` alone is ignored. The operation never completes while an attempt
/// is still running: an attempt that ignores its cancellation is told again
/// every `retry_options::cancellation_repeat` until the overall deadline and
/// a few repeats beyond it; then it is reported to the observer as stuck
/// (`attempt_stuck`) and waited for without a timer.
///
/// \par Exceptions
/// Throws std::invalid_argument, before starting, if the policy is invalid,
/// has an observed limit or a percentile hedge delay without a tracker in
/// the options, or asks for
/// hedges (policy::hedging) for an operation that is not safe to repeat.
/// What async_retry would refuse to start with `p` and `options` (the
/// exception's message), or nothing: for a layer that starts async_retry
/// later and must refuse at its own call, as async_retry does.
inline std::optional<std::string> retry_setup_problem(const policy& p, const retry_options& options) {
  if (auto problem = p.validate()) return "coretry::policy: " + *problem;
  // A hedge repeats the operation while it may still be taking effect.
  if (p.hedging.max_hedges > 0 && options.safety == repeat_safety::unsafe)
    return "coretry::policy: hedging needs an operation that is safe to repeat "
           "(idempotent, or carrying an idempotency key)";
  if (p.observed && !options.tracker)
    return "coretry::policy: an observed attempt limit needs retry_options::tracker";
  if (p.hedging.max_hedges > 0 && p.hedging.delay_percentile && !options.tracker)
    return "coretry::policy: a hedge delay from a percentile needs retry_options::tracker";
  if (options.cancellation_repeat < duration::zero())
    return "coretry: retry_options::cancellation_repeat is negative (zero sends a cancellation once)";
  return std::nullopt;
}

template <class Timer = boost::asio::steady_timer, class Executor, class Factory, class Classifier,
          class CompletionToken = detail::default_token_t<Executor>>
  requires retry_classifier<Classifier, Timer, Factory>
auto async_retry(const Executor& ex, const policy& p, const retry_options& options, Factory&& factory,
                 Classifier&& classify, CompletionToken&& token = detail::default_token_t<Executor>()) {
  using value_type = detail::retry_value_t<Timer, Factory>;
  // Checked now, so that a bad policy throws from this call whatever the token.
  if (auto problem = retry_setup_problem(p, options)) throw std::invalid_argument(*problem);
  return boost::asio::async_initiate<CompletionToken, retry_signature<value_type>>(
      detail::initiate_retry<Timer, std::decay_t<Factory>, std::decay_t<Classifier>, value_type>{}, token,
      boost::asio::any_io_executor(ex), p, options, std::forward<Factory>(factory),
      std::forward<Classifier>(classify));
}

/// async_retry with the default options (unsafe to repeat after an ambiguous
/// failure) and the default classifier.
template <class Timer = boost::asio::steady_timer, class Executor, class Factory,
          class CompletionToken = detail::default_token_t<Executor>>
  requires(!std::is_same_v<std::decay_t<Factory>, retry_options>)
auto async_retry(const Executor& ex, const policy& p, Factory&& factory,
                 CompletionToken&& token = detail::default_token_t<Executor>()) {
  return async_retry<Timer>(ex, p, retry_options{}, std::forward<Factory>(factory), default_classifier{},
                            std::forward<CompletionToken>(token));
}

/// async_retry with the default classifier (error codes; nested outcomes).
template <class Timer = boost::asio::steady_timer, class Executor, class Factory,
          class CompletionToken = detail::default_token_t<Executor>>
  requires(!retry_classifier<CompletionToken, Timer, Factory>)
auto async_retry(const Executor& ex, const policy& p, const retry_options& options, Factory&& factory,
                 CompletionToken&& token = detail::default_token_t<Executor>()) {
  return async_retry<Timer>(ex, p, options, std::forward<Factory>(factory), default_classifier{},
                            std::forward<CompletionToken>(token));
}

} // namespace coretry

#endif
