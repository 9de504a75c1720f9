#ifndef CORETRY_TESTS_CLI_PROCESS_HPP
#define CORETRY_TESTS_CLI_PROCESS_HPP

#include <eventually.hpp>
#include <program.hpp>
#include <server_thread.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace cli_tests {

using namespace std::chrono_literals;

/// The program under test.
inline const std::string program = CORETRY_CLI_PROGRAM;

using coretry::test::child_process;
using coretry::test::eventually;
using coretry::test::listening_program;
using coretry::test::run_result;
using coretry::test::server_thread;

/// Runs the program with `args` to completion.
inline run_result run(std::vector<std::string> args, std::chrono::milliseconds timeout = 20s) {
  return coretry::test::run(program, std::move(args), timeout);
}

/// The whole content of the file at `path` (empty if it cannot be read).
std::string read_file(const std::string& path);

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

/// What the cases that write files start from: a fault server and an empty
/// directory.
struct server_and_directory {
  server_thread server;
  temporary_directory directory;
};

} // namespace cli_tests

#endif
