#ifndef CORETRY_RETRY_OPTIONS_HPP
#define CORETRY_RETRY_OPTIONS_HPP
/// @file
/// What an operation is linked to besides its timing policy: the shared
/// objects it reports to and asks (retry_controls), and, for async_retry,
/// whether it may be repeated and its name (retry_options). The HTTP
/// client's request_options shares retry_controls; it derives the safety
/// and the name itself.

#include <coretry/budget.hpp>
#include <coretry/concurrency_limit.hpp>
#include <coretry/gate.hpp>
#include <coretry/latency_tracker.hpp>
#include <coretry/observer.hpp>
#include <coretry/policy.hpp>
#include <coretry/random.hpp>
#include <coretry/verdict.hpp>

#include <chrono>
#include <string_view>

namespace coretry {

/// How often a cancelled attempt that has not finished is told again.
inline constexpr duration default_cancellation_repeat = std::chrono::milliseconds(10);

/// The shared objects an operation reports to and asks, and how its
/// cancellation is repeated: one set of members for async_retry's
/// retry_options and the HTTP client's request_options. Every object is
/// borrowed: it must outlive the operations using it.
struct retry_controls {
  /// Shared retry budget (thread-safe); null means retries are bounded by the policy alone.
  retry_budget* budget = nullptr;
  /// Shared retry gate (thread-safe), told every attempt's result and asked
  /// before every retry; null means none. All operations sharing one gate
  /// must use one timer clock: the gate compares their instants. The gate
  /// must outlive every operation using it (an operation destroyed unrun,
  /// with its io_context, still tells the gate its probe is over).
  retry_gate* gate = nullptr;
  /// Shared latency tracker of the dependency (thread-safe), told every
  /// attempt's result: a success's latency, a timeout's limit (a censored
  /// sample), other failures as counts; an attempt the caller cancelled is
  /// not recorded. Read for the attempt limit when the policy has an
  /// observed limit (which then needs one). Null: none. All operations
  /// sharing one tracker must use one timer clock. It must outlive them.
  latency_tracker* tracker = nullptr;
  /// Shared concurrency limit of the dependency (thread-safe): every
  /// attempt (first, retry, hedge) holds one of its permits from its start
  /// until its operation has completed. With none free an attempt waits a
  /// short bounded time, then the operation stops with
  /// stop_reason::concurrency_limited; a hedge is sent only on a spare
  /// permit. Asked after the gate and before the budget. Null: none. All
  /// operations sharing one limit must use one timer clock. It must outlive
  /// them.
  concurrency_limit* limit = nullptr;
  /// Receives the operation's events; null means none.
  retry_observer* observer = nullptr;
  /// Jitter draws; null means the process-wide independent_random.
  random_source* random = nullptr;
  /// While a cancelled attempt has not finished, its terminal cancellation is
  /// sent again at this interval. Composed operations that start their next
  /// step without checking for cancellation (Beast's HTTP reads in Boost
  /// 1.81) miss a signal that arrives between two steps; repeating it bounds
  /// how long such an attempt can outlive its deadline. Zero: sent once;
  /// negative: refused.
  duration cancellation_repeat = default_cancellation_repeat;
};

/// Everything about an operation that is not its timing policy: the shared
/// controls, whether it may be repeated, its name.
struct retry_options : retry_controls {
  /// Whether the operation may be repeated after an ambiguous failure (a
  /// timeout after sending). Unsafe by default: a read says it is idempotent.
  repeat_safety safety = repeat_safety::unsafe;
  /// Bounded name for events (a route template, never a URL with a query).
  /// Must outlive the operation; a string literal does.
  std::string_view operation = "operation";
};

} // namespace coretry

#endif
