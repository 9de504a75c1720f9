#ifndef CORETRY_TESTS_CLI_PROCESS_HPP
#define CORETRY_TESTS_CLI_PROCESS_HPP

#include <faults/fault_server.hpp>

#include <eventually.hpp>
#include <program.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace cli_tests {

using namespace std::chrono_literals;

/// The program under test.
inline const std::string program = CORETRY_CLI_PROGRAM;

using coretry::test::child_process;
using coretry::test::eventually;
using coretry::test::listening_program;
using coretry::test::run_result;

/// Runs the program with `args` to completion.
inline run_result run(std::vector<std::string> args, std::chrono::milliseconds timeout = 20s) {
  return coretry::test::run(program, std::move(args), timeout);
}

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

} // namespace cli_tests

#endif
