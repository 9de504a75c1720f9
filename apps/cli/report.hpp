#ifndef CORETRY_CLI_REPORT_HPP
#define CORETRY_CLI_REPORT_HPP

#include "cli/attempt_details.hpp"

#include <coretry/http/client.hpp>
#include <coretry/observer.hpp>

#include <boost/json/object.hpp>

#include <cstdio>
#include <functional>
#include <string>

// How an operation is shown: as it happens (a timeline), and once it is over
// (a one-line summary, or one JSON object).
namespace coretry::cli {

/// Prints each attempt, its allowance and its result, and each wait with its
/// length and source, as the engine reports them.
class timeline final : public retry_observer {
public:
  /// Lines go to `out`, each after `prefix`; `details` supplies each
  /// attempt's HTTP status. `before_line` runs before every line (to clear a
  /// progress indicator off the terminal).
  timeline(std::FILE* out, std::string prefix, unsigned max_attempts, const attempt_details& details,
           std::function<void()> before_line = {});

  void attempt_started(const attempt_started_event& e) noexcept override;
  void attempt_finished(const attempt_finished_event& e) noexcept override;
  void backoff_scheduled(const backoff_event& e) noexcept override;
  void stopped(const stop_event& e) noexcept override;

private:
  void line(duration at, const std::string& text) noexcept;
  /// A line that goes on with the one before it (no time of its own).
  void more(const std::string& text) noexcept;

  std::FILE* out_;
  std::string prefix_;
  unsigned max_attempts_;
  const attempt_details& details_;
  std::function<void()> before_line_;
};

/// "HTTP 502 Bad Gateway" or "attempt timed out while reading": what an
/// attempt produced, without its classification.
std::string describe_attempt_result(const attempt_record& record, const attempt_detail* detail);

/// "new connection to 127.0.0.1:8080: pool_wait 0.012 ms, connect 0.210 ms,
/// ...": where the attempt's connection went and the phases it reached, in
/// order, with the time spent in each ("reused connection to ...", or "no
/// connection" when it never got one).
std::string describe_phases(const attempt_detail& detail);
/// "time_connect 0.222 ms, time_appconnect -, time_starttransfer 150.9 ms,
/// time_total 151.2 ms": the same as curl's cumulative times.
std::string describe_curl_times(const phase_timings& phases);

/// One line for a failed operation: the stop reason (and `cause`, such as
/// "SIGINT", when given), the attempts, the time and the last status or
/// failure category.
std::string describe_failure(const http::result& result, const attempt_details& details,
                             std::string_view cause = {});

/// Everything about an operation's outcome, for --json.
boost::json::object describe_outcome(const http::result& result, const attempt_details& details);

} // namespace coretry::cli

#endif
