#ifndef CORETRY_TESTS_CLI_PROCESS_HPP
#define CORETRY_TESTS_CLI_PROCESS_HPP

#include <faults/fault_server.hpp>

#include <eventually.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sys/types.h>

namespace cli_tests {

using namespace std::chrono_literals;

/// The program under test.
inline const std::string program = CORETRY_CLI_PROGRAM;

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

  explicit child_process(std::vector<std::string> args);
  child_process(std::vector<std::string> args, options opts);
  ~child_process();
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  /// The next line of stdout, without its newline, or nullopt if none came
  /// within `timeout`.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  void send(int signal);
  /// Collects the rest of the output and waits for the exit; kills the child
  /// if it is not done within `timeout`.
  run_result finish(std::chrono::milliseconds timeout = 20s);

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

/// Runs the program with `args` to completion.
run_result run(std::vector<std::string> args, std::chrono::milliseconds timeout = 20s);

/// A fault server on its own thread.
class server_thread {
public:
  explicit server_thread(coretry::faults::fault_server_options options = {});
  ~server_thread();
  server_thread(const server_thread&) = delete;
  server_thread& operator=(const server_thread&) = delete;

  coretry::faults::fault_server* operator->() { return &*server_; }
  std::string url(const std::string& target) const { return server_->base_url() + target; }

private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::optional<coretry::faults::fault_server> server_;
  std::thread thread_;
};

/// A fresh empty directory under /tmp, removed with its contents at the end.
class temporary_directory {
public:
  temporary_directory();
  ~temporary_directory();
  temporary_directory(const temporary_directory&) = delete;
  temporary_directory& operator=(const temporary_directory&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  /// The names of the files in it.
  std::vector<std::string> entries() const;

private:
  std::string path_;
};

using coretry::test::eventually;

} // namespace cli_tests

#endif
