#ifndef CORETRY_TESTS_SUPPORT_PROGRAM_HPP
#define CORETRY_TESTS_SUPPORT_PROGRAM_HPP

// A program under test, run as a user runs it: a child process whose output
// and exit status the test reads, and a server program that announces the
// address it listens on and is stopped with a signal. The command line's
// tests (tests/cli) and the bookstore's (tests/bookstore) run their programs
// through these.

#include <boost/json/object.hpp>

#include <chrono>
#include <csignal>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace coretry::test {

/// How a finished child went.
struct run_result {
  int status = -1;           ///< exit status, or 128 + signal if it was killed
  std::string out;           ///< everything it wrote to stdout
  std::string err;           ///< everything it wrote to stderr (or to the terminal, with a pty)
  bool timed_out = false;    ///< it had to be killed
  std::chrono::steady_clock::duration took{};

  /// stderr's lines.
  std::vector<std::string> err_lines() const;
  /// stdout parsed as one JSON object (fails the test otherwise).
  boost::json::object json() const;
};

/// A child process with its stdout and stderr on pipes (or stderr on a
/// pseudo-terminal), stdin from /dev/null. Killed if still running when
/// destroyed, so that a failing test never leaves one behind.
class child_process {
public:
  struct options {
    bool stderr_on_terminal = false;
  };

  /// Starts `program` with `args`.
  child_process(const std::string& program, std::vector<std::string> args);
  child_process(const std::string& program, std::vector<std::string> args, options opts);
  ~child_process();
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  /// The next line of stdout, without its newline, or nullopt if none came
  /// within `timeout`.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  void send(int signal);
  /// Collects the rest of the output and waits for the exit; kills the child
  /// if it is not done within `timeout`.
  run_result finish(std::chrono::milliseconds timeout = std::chrono::seconds(20));

private:
  // Reads whatever is available until `until`; returns false once both streams are closed.
  bool pump(std::chrono::steady_clock::time_point until);

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_;
  std::string err_;
  std::chrono::steady_clock::time_point started_;
};

/// Runs `program` with `args` to completion.
run_result run(const std::string& program, std::vector<std::string> args,
               std::chrono::milliseconds timeout = std::chrono::seconds(20));

/// A server program under test: a child process that is ready once its first
/// line on stdout, "listening on URL", has told where it listens.
class listening_program {
public:
  /// Starts `program` with `args` and waits up to `startup` for that line;
  /// fails the test when it does not come or names no http(s) URL.
  listening_program(const std::string& program, std::vector<std::string> args,
                    std::chrono::milliseconds startup = std::chrono::seconds(10));

  /// The URL it announced, "http://127.0.0.1:PORT" or "https://...".
  const std::string& base_url() const { return base_url_; }
  /// The port of that URL.
  unsigned short port() const;
  /// Sends `signal` and waits up to `timeout` for the exit (killing it then).
  run_result stop(int signal = SIGTERM, std::chrono::milliseconds timeout = std::chrono::seconds(20));

private:
  child_process child_;
  std::string base_url_;
};

} // namespace coretry::test

#endif
