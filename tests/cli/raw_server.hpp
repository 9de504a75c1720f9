#ifndef CORETRY_TESTS_CLI_RAW_SERVER_HPP
#define CORETRY_TESTS_CLI_RAW_SERVER_HPP

// A scripted HTTP server on a raw loopback socket, for responses the fault
// server cannot give (bodies of many megabytes, a body cut short): each
// connection's request header is read, then the script for that request
// (counted from 1 over the server's life) writes whatever bytes it likes to
// the socket and returns; the connection is then closed.

#include <loopback_listener.hpp>

#include <atomic>
#include <cerrno>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace cli_tests {

class raw_server {
public:
  /// `script(n, fd)`: answers request n on the connected socket `fd`.
  using script = std::function<void(unsigned request, int fd)>;

  explicit raw_server(script answer) : answer_(std::move(answer)), thread_([this] { serve(); }) {}

  ~raw_server() {
    stopping_ = true;
    thread_.join();
  }
  raw_server(const raw_server&) = delete;
  raw_server& operator=(const raw_server&) = delete;

  std::string url(std::string_view target) const {
    return "http://127.0.0.1:" + std::to_string(listener_.port()) + std::string{target};
  }
  /// Requests whose header arrived.
  unsigned requests() const { return requests_; }

  /// Writes all of `bytes`; false once the peer is gone.
  static bool send_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  /// `size` bytes of a pattern that shows any byte out of place: byte i of
  /// the body is `pattern_byte(i)`.
  static char pattern_byte(std::uint64_t i) { return static_cast<char>('a' + (i * 7 + i / 4096) % 26); }

  /// A 200 (or `status`) with a Content-Length of `size`, of which only the
  /// first `sent` bytes are written (all by default).
  static void send_pattern(int fd, std::uint64_t size, std::uint64_t sent = ~std::uint64_t{0}, int status = 200) {
    const std::string head = "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Length: " + std::to_string(size) +
                             "\r\nConnection: close\r\n\r\n";
    if (!send_all(fd, head)) return;
    if (sent > size) sent = size;
    std::string block;
    for (std::uint64_t at = 0; at < sent;) {
      const std::uint64_t n = std::min<std::uint64_t>(64 * 1024, sent - at);
      block.resize(n);
      for (std::uint64_t i = 0; i < n; ++i) block[i] = pattern_byte(at + i);
      if (!send_all(fd, block)) return;
      at += n;
    }
  }

private:
  void serve() {
    while (!stopping_) {
      const int fd = listener_.accept(50);
      if (fd < 0) continue;
      if (read_request_header(fd)) {
        const unsigned n = ++requests_;
        answer_(n, fd);
      }
      ::shutdown(fd, SHUT_WR);
      ::close(fd);
    }
  }

  // Reads up to the blank line that ends a request header (bounded, 2 s).
  bool read_request_header(int fd) {
    std::string received;
    char buffer[4096];
    while (received.find("\r\n\r\n") == std::string::npos) {
      if (received.size() > 64 * 1024) return false;
      pollfd ready{fd, POLLIN, 0};
      if (::poll(&ready, 1, 2000) <= 0) return false;
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) return false;
      received.append(buffer, static_cast<std::size_t>(n));
    }
    return true;
  }

  script answer_;
  coretry::test::loopback_listener listener_;
  std::atomic<bool> stopping_{false};
  std::atomic<unsigned> requests_{0};
  std::thread thread_;
};

} // namespace cli_tests

#endif
