#ifndef CORETRY_TESTS_REDIS_FAKE_REDIS_HPP
#define CORETRY_TESTS_REDIS_FAKE_REDIS_HPP

// A fake Redis the test scripts: it answers each command as told.

#include <loopback_listener.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace redis_tests {

/// A TCP listener on 127.0.0.1 that, for every connection, answers the n-th
/// command read (one per read: the client waits for each reply) with
/// `answer(n)` (nothing when empty), until the client closes the connection
/// (counted in `closed`).
class fake_redis {
public:
  explicit fake_redis(std::function<std::string(int, const std::string&)> answer)
      : answer_(std::move(answer)), thread_([this] { serve(); }) {}
  ~fake_redis() {
    done_ = true;
    thread_.join();
  }
  std::uint16_t port() const { return listener_.port(); }
  int accepted() const { return accepted_.load(); }
  int closed() const { return closed_.load(); }

private:
  // Waits for `fd` to be readable, at most `ms`, or until the test ends.
  bool readable(int fd, int ms) {
    for (int waited = 0; waited < ms && !done_; waited += 10) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 10) > 0) return true;
    }
    return false;
  }
  void serve() {
    while (!done_) {
      const int c = listener_.accept(100);
      if (c < 0) continue;
      ++accepted_;
      char buffer[4096];
      for (int n = 0;; ++n) {
        if (!readable(c, 5000)) break;
        const ssize_t got = ::recv(c, buffer, sizeof buffer, 0);
        if (got <= 0) {
          ++closed_;
          break;
        }
        const std::string out = answer_(n, std::string(buffer, static_cast<std::size_t>(got)));
        std::size_t sent = 0;
        while (sent < out.size()) {
          const ssize_t k = ::send(c, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
          if (k <= 0) break; // the client closed it mid-way
          sent += static_cast<std::size_t>(k);
        }
      }
      ::close(c);
    }
  }

  std::function<std::string(int, const std::string&)> answer_;
  coretry::test::loopback_listener listener_;
  std::atomic<bool> done_{false};
  std::atomic<int> accepted_{0}, closed_{0};
  std::thread thread_;
};

/// The arguments of one command as the client sent it (a RESP array of
/// bulk strings holding no CR LF).
inline std::vector<std::string> command_arguments(const std::string& raw) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (auto end = raw.find("\r\n"); end != std::string::npos; end = raw.find("\r\n", start)) {
    lines.push_back(raw.substr(start, end - start));
    start = end + 2;
  }
  std::vector<std::string> args;
  for (std::size_t i = 2; i < lines.size(); i += 2) args.push_back(lines[i]);
  return args;
}

} // namespace redis_tests

#endif
