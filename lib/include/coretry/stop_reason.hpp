#ifndef CORETRY_STOP_REASON_HPP
#define CORETRY_STOP_REASON_HPP

#include <boost/system/error_code.hpp>

#include <string_view>
#include <type_traits>

namespace coretry {

/// Why a retrying operation stopped. Every stop has exactly one reason.
/// The enumerators are also error codes of coretry's category
/// (`succeeded` is the zero, "no error", value).
enum class stop_reason : int {
  succeeded = 0,          ///< an attempt succeeded
  rejected = 1,           ///< a known failure that another attempt cannot fix
  attempts_exhausted = 2, ///< the last allowed attempt failed transiently
  deadline_exhausted = 3, ///< too little of the overall deadline is left for a useful attempt
  server_delay_too_long = 4, ///< the server asked for a wait that does not fit the deadline
  budget_exhausted = 5,   ///< the shared retry budget had no token for the retry
  cancelled = 6,          ///< the caller cancelled the operation
  outcome_unknown = 7,    ///< a non-idempotent attempt may have taken effect: not repeated
  dependency_unhealthy = 8, ///< the retry gate found the dependency unhealthy: no slot for the retry in time
  concurrency_limited = 9, ///< the concurrency limit had no permit for the attempt (none free, none freed within the wait)
};

/// Errors of an individual attempt, in the same category as stop_reason.
enum class attempt_error : int {
  timed_out = 32, ///< the attempt's deadline expired and the attempt was cancelled
};

/// The category of stop_reason and attempt_error codes ("coretry").
const boost::system::error_category& retry_category() noexcept;

/// Stable snake_case name of a reason, as used in logs, metrics and JSON.
std::string_view to_string(stop_reason reason) noexcept;

inline boost::system::error_code make_error_code(stop_reason r) noexcept {
  return {static_cast<int>(r), retry_category()};
}
inline boost::system::error_code make_error_code(attempt_error e) noexcept {
  return {static_cast<int>(e), retry_category()};
}

/// Number of distinct stop reasons; useful for per-reason counters.
inline constexpr int stop_reason_count = 10;

} // namespace coretry

template <>
struct boost::system::is_error_code_enum<coretry::stop_reason> : std::true_type {};
template <>
struct boost::system::is_error_code_enum<coretry::attempt_error> : std::true_type {};

#endif
