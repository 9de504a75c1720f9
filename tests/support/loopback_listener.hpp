#ifndef CORETRY_TESTS_SUPPORT_LOOPBACK_LISTENER_HPP
#define CORETRY_TESTS_SUPPORT_LOOPBACK_LISTENER_HPP

// The listening socket of a scripted test server on raw sockets (the CLI
// tests' raw_server, the Redis tests' fake_redis).

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace coretry::test {

/// A TCP socket listening on 127.0.0.1, on a port the kernel chose; closed
/// when destroyed.
class loopback_listener {
public:
  /// Throws std::runtime_error when it cannot listen.
  loopback_listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(std::string{"socket: "} + std::strerror(errno));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0; // any free port
    socklen_t length = sizeof address;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      const int error = errno;
      ::close(fd_);
      throw std::runtime_error(std::string{"bind/listen on 127.0.0.1: "} + std::strerror(error));
    }
    port_ = ntohs(address.sin_port);
  }
  ~loopback_listener() { ::close(fd_); }
  loopback_listener(const loopback_listener&) = delete;
  loopback_listener& operator=(const loopback_listener&) = delete;

  unsigned short port() const { return port_; }

  /// The next connection, accepted within `timeout_ms`; -1 if none came.
  int accept(int timeout_ms) {
    pollfd ready{fd_, POLLIN, 0};
    if (::poll(&ready, 1, timeout_ms) <= 0) return -1;
    return ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  }

private:
  int fd_ = -1;
  unsigned short port_ = 0;
};

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
inline bool loopback_accepts(unsigned short port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  const bool connected = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return connected;
}

/// Waits up to `timeout` for a server just started to accept on `port`.
inline bool wait_until_accepting(unsigned short port, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (loopback_accepts(port)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

} // namespace coretry::test

#endif
