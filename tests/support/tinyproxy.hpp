#ifndef CORETRY_TESTS_SUPPORT_TINYPROXY_HPP
#define CORETRY_TESTS_SUPPORT_TINYPROXY_HPP

// tinyproxy (Debian's package) on 127.0.0.1, started by the test with a
// configuration file of its own, on a free port: a real HTTP proxy for the
// HTTP client's tests and the command line's.

#include "loopback_listener.hpp"
#include "program.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

namespace coretry::test {

/// tinyproxy's program, or empty when it is not installed.
inline std::string tinyproxy_program() {
  for (const char* path : {"/usr/bin/tinyproxy", "/usr/sbin/tinyproxy", "/usr/local/bin/tinyproxy"})
    if (::access(path, X_OK) == 0) return path;
  return {};
}

/// A running tinyproxy, stopped when destroyed. Construct it only when
/// tinyproxy_program() is not empty (else skip_test()).
class tinyproxy {
public:
  tinyproxy() {
    char pattern[] = "/tmp/coretry-tinyproxy-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    directory_ = pattern;
    // The port is free when it is chosen; another program could take it
    // before tinyproxy binds it, so a start that fails tries another.
    for (int tries = 0; tries < 5 && !child_; ++tries) start();
    REQUIRE_MESSAGE(child_, "tinyproxy did not start; its log: " << log());
  }
  ~tinyproxy() {
    child_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
  tinyproxy(const tinyproxy&) = delete;
  tinyproxy& operator=(const tinyproxy&) = delete;

  unsigned short port() const { return port_; }
  /// "http://127.0.0.1:PORT".
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  /// What tinyproxy logged so far (one line per connection and request).
  std::string log() const {
    std::ifstream file(directory_ + "/tinyproxy.log");
    return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  }

private:
  void start() {
    {
      loopback_listener probe;
      port_ = probe.port();
    }
    const std::string config = directory_ + "/tinyproxy.conf";
    std::ofstream(config) << "Port " << port_ << "\nListen 127.0.0.1\nTimeout 10\nMaxClients 16\n"
                          << "Allow 127.0.0.1\nLogLevel Connect\nLogFile \"" << directory_ << "/tinyproxy.log\"\n";
    child_.emplace(tinyproxy_program(), std::vector<std::string>{"-d", "-c", config});
    if (!wait_until_accepting(port_)) child_.reset();
  }

  std::string directory_;
  unsigned short port_ = 0;
  std::optional<child_process> child_;
};

} // namespace coretry::test

#endif
