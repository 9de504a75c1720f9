#ifndef CORETRY_CLI_EXIT_STATUS_HPP
#define CORETRY_CLI_EXIT_STATUS_HPP

#include <coretry/stop_reason.hpp>

// The program's exit statuses. Every stop reason has its own, so that a
// script can tell "fix the request" from "try later" from "find out whether
// it happened" without parsing any output.
namespace coretry::cli::exit_status {

inline constexpr int success = 0;
inline constexpr int failure = 1; ///< the program could not do its job (cannot write the output, ...)
inline constexpr int usage = 2;   ///< bad command line: nothing was sent
inline constexpr int rejected = 10;
inline constexpr int attempts_exhausted = 11;
inline constexpr int deadline_exhausted = 12;
inline constexpr int server_delay_too_long = 13;
inline constexpr int budget_exhausted = 14;
inline constexpr int cancelled = 15;
inline constexpr int outcome_unknown = 16;
inline constexpr int dependency_unhealthy = 17;
inline constexpr int concurrency_limited = 18;
/// The answer is a redirect (3xx) that was not followed: without -L, or one
/// -L does not follow (300, 304, 305, 306, or no Location). Its body was
/// written as a 2xx body is.
inline constexpr int redirect_not_followed = 19;

constexpr int for_stop(stop_reason reason) noexcept {
  switch (reason) {
  case stop_reason::succeeded: return success;
  case stop_reason::rejected: return rejected;
  case stop_reason::attempts_exhausted: return attempts_exhausted;
  case stop_reason::deadline_exhausted: return deadline_exhausted;
  case stop_reason::server_delay_too_long: return server_delay_too_long;
  case stop_reason::budget_exhausted: return budget_exhausted;
  case stop_reason::cancelled: return cancelled;
  case stop_reason::outcome_unknown: return outcome_unknown;
  case stop_reason::dependency_unhealthy: return dependency_unhealthy;
  case stop_reason::concurrency_limited: return concurrency_limited;
  }
  return failure;
}

} // namespace coretry::cli::exit_status

#endif
