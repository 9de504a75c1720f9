#ifndef CORETRY_CLI_PROGRESS_HPP
#define CORETRY_CLI_PROGRESS_HPP

#include <coretry/policy.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdio>
#include <string>

namespace coretry::cli {

/// A single status line on a terminal ("/ 3.2 s  attempt 2 of 3") while a
/// request runs. The client reads whole bodies, so it shows time and attempts
/// rather than bytes. It appears only after a quiet period, so quick requests
/// never flash it, and only when enabled: the caller decides whether the
/// stream is a terminal.
class progress_line {
public:
  progress_line(boost::asio::any_io_executor ex, std::FILE* out, bool enabled, std::string label);

  /// Starts the clock; the line appears after `quiet_period`.
  void start();
  void attempt_started(unsigned attempt, unsigned max_attempts);
  void waiting(duration wait);
  /// Erases the line (if shown) so that other output starts on a clean line;
  /// the next tick draws it again.
  void clear();
  /// Erases the line and stops updating it.
  void stop();

  static constexpr std::chrono::milliseconds quiet_period{500};
  static constexpr std::chrono::milliseconds tick{100};

private:
  void schedule();
  void draw();

  boost::asio::steady_timer timer_;
  std::FILE* out_;
  bool enabled_;
  bool shown_ = false;
  bool stopped_ = false;
  std::string label_;
  std::string state_ = "connecting";
  unsigned frame_ = 0;
  std::chrono::steady_clock::time_point started_{};
};

} // namespace coretry::cli

#endif
