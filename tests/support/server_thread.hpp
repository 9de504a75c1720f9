#ifndef CORETRY_TESTS_SUPPORT_SERVER_THREAD_HPP
#define CORETRY_TESTS_SUPPORT_SERVER_THREAD_HPP

// The fault server in the test's own process, for every suite that calls it
// (tests/faults, tests/http, tests/cli, tests/bookstore).

#include <faults/fault_server.hpp>

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace coretry::test {

/// A fault_server on its own io_context and threads, listening on loopback.
class server_thread {
public:
  /// Runs the io_context on `threads` threads.
  explicit server_thread(coretry::faults::fault_server_options options = {}, unsigned threads = 1);
  /// Stops the server and joins its threads; an io_context still busy after a
  /// few seconds fails the test instead of hanging it.
  ~server_thread();
  server_thread(const server_thread&) = delete;
  server_thread& operator=(const server_thread&) = delete;

  coretry::faults::fault_server* operator->() { return &*server_; }
  /// `target` on the server: its base URL followed by `target`.
  std::string url(const std::string& target) const { return server_->base_url() + target; }

  /// stop(), then waits for the io_context to run out of work, which it does
  /// only once the server has closed every socket and cancelled every timer.
  bool stop_and_wait(std::chrono::milliseconds timeout = std::chrono::seconds(5));

private:
  boost::asio::io_context io_;
  std::optional<coretry::faults::fault_server> server_;
  std::vector<std::thread> threads_;
  std::vector<std::future<void>> finished_;
};

/// Fault servers on several loopback addresses (127.0.0.2 and up need no
/// setup on Linux) sharing one free port: a name's fleet, for
/// `--resolve NAME:PORT:A,B,...`. A port taken on one of the addresses is
/// given up for another (20 tries, then the test fails).
class server_fleet {
public:
  explicit server_fleet(const std::vector<std::string>& addresses);
  server_thread& operator[](std::size_t i) { return *servers_[i]; }
  unsigned short port() const { return port_; }

private:
  std::vector<std::unique_ptr<server_thread>> servers_;
  unsigned short port_ = 0;
};

} // namespace coretry::test

#endif
