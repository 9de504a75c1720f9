#ifndef CORETRY_TESTS_FAULTS_HOSTILE_HPP
#define CORETRY_TESTS_FAULTS_HOSTILE_HPP

// What the hostile-client tests of both servers (the fault server here, the
// bookstore in tests/bookstore) need: a raw, blocking loopback connection
// that writes whatever it is told and reports how the server ended the
// exchange, the process's memory and CPU time, and the checks both make of
// a server at its connection cap and of one out of descriptors.

#include <eventually.hpp>
#include <skip.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

namespace hostile {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif
#else
inline constexpr bool sanitized = false;
#endif

/// How the server ended an exchange, seen from the client.
struct ending {
  std::string received; ///< every byte the server sent
  bool closed = false;  ///< the server closed (FIN) or reset the connection
  bool timed_out = false;
  clock::duration elapsed{};
  /// The status code of the first response, 0 if none.
  unsigned status() const {
    if (!received.starts_with("HTTP/1.1 ") || received.size() < 12) return 0;
    return static_cast<unsigned>(std::stoul(received.substr(9, 3)));
  }
  /// A 4xx answer, or the connection closed: a clean refusal.
  bool refused_cleanly() const { return !timed_out && ((status() >= 400 && status() < 500) || closed); }
};

/// A blocking TCP connection to 127.0.0.1:port.
class raw_connection {
public:
  /// Without `connect_now` only the socket is made (a descriptor is taken):
  /// connect() later, even when the process can open no more descriptors.
  explicit raw_connection(unsigned short port, bool connect_now = true) : port_(port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE_MESSAGE(fd_ >= 0, "socket: ", std::strerror(errno));
    if (connect_now) connect();
  }

  void connect() { REQUIRE_MESSAGE(try_connect(), "connect: ", std::strerror(errno)); }

  /// Sets SO_RCVBUF; before connect() it also bounds the window announced
  /// to the server (the kernel's minimum is about 2 KiB).
  void receive_buffer(int bytes) {
    REQUIRE(::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes) == 0);
  }

  /// connect() without assertions, for use while no descriptor is free.
  bool try_connect() {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port_);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  }
  ~raw_connection() { close(); }
  raw_connection(const raw_connection&) = delete;
  raw_connection& operator=(const raw_connection&) = delete;

  /// Writes all of `bytes` unless the server stops taking them within
  /// `timeout` or closes; returns whether everything was written.
  bool send(std::string_view bytes, std::chrono::milliseconds timeout = 2s) {
    const auto until = clock::now() + timeout;
    while (!bytes.empty()) {
      pollfd ready{fd_, POLLOUT, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now()).count();
      if (left <= 0 || ::poll(&ready, 1, static_cast<int>(left)) <= 0) return false;
      const ssize_t sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (sent <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(sent));
    }
    return true;
  }

  /// Reads until the server closes the connection or `timeout` passes.
  ending wait_for_end(std::chrono::milliseconds timeout) {
    ending out;
    const auto start = clock::now();
    const auto until = start + timeout;
    char chunk[4096];
    for (;;) {
      pollfd ready{fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now()).count();
      if (left <= 0 || ::poll(&ready, 1, static_cast<int>(left)) <= 0) {
        out.timed_out = true;
        break;
      }
      const ssize_t got = ::recv(fd_, chunk, sizeof chunk, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        out.closed = true;
        break;
      }
      out.received.append(chunk, static_cast<std::size_t>(got));
    }
    out.elapsed = clock::now() - start;
    return out;
  }

  /// Reads one response's bytes: until the header's end and Content-Length
  /// more bytes, the close, or the timeout. Empty on timeout.
  std::string read_response(std::chrono::milliseconds timeout) {
    const auto until = clock::now() + timeout;
    std::string received;
    char chunk[4096];
    for (;;) {
      const auto end = received.find("\r\n\r\n");
      if (end != std::string::npos) {
        std::size_t length = 0;
        if (const auto at = received.find("Content-Length: "); at != std::string::npos && at < end)
          length = std::stoul(received.substr(at + 16));
        if (received.size() >= end + 4 + length) return received;
      }
      pollfd ready{fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now()).count();
      if (left <= 0 || ::poll(&ready, 1, static_cast<int>(left)) <= 0) return {};
      const ssize_t got = ::recv(fd_, chunk, sizeof chunk, 0);
      if (got <= 0) return received;
      received.append(chunk, static_cast<std::size_t>(got));
    }
  }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

private:
  unsigned short port_;
  int fd_ = -1;
};

/// A GET of `target` on a kept-alive connection.
inline std::string get_request(std::string_view target) {
  return "GET " + std::string{target} + " HTTP/1.1\r\nHost: x\r\n\r\n";
}

/// The process's resident memory, in KiB (VmRSS in /proc/self/status).
inline long resident_kib() {
  std::ifstream status{"/proc/self/status"};
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with("VmRSS:")) return std::stol(line.substr(6));
  FAIL("no VmRSS in /proc/self/status");
  return 0;
}

/// CPU time used by the whole process (every thread), user and system.
inline std::chrono::microseconds cpu_time() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const auto micros = [](const timeval& t) { return std::chrono::seconds{t.tv_sec} + std::chrono::microseconds{t.tv_usec}; };
  return micros(usage.ru_utime) + micros(usage.ru_stime);
}

/// CPU time the process uses while `duration` passes.
inline std::chrono::microseconds cpu_used_over(std::chrono::milliseconds duration) {
  const auto before = cpu_time();
  std::this_thread::sleep_for(duration);
  return cpu_time() - before;
}

/// While alive, the process can open no descriptor: the soft RLIMIT_NOFILE
/// is lowered to just above the highest open descriptor and every lower free
/// number is taken by a duplicate. Restores both on destruction. Make no
/// doctest assertion while it lives (record results, check them after):
/// the sanitizers' runtime needs descriptors to check such calls.
class descriptors_exhausted {
public:
  descriptors_exhausted() {
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved_) == 0);
    int highest = 0;
    if (DIR* dir = ::opendir("/proc/self/fd")) {
      while (const dirent* entry = ::readdir(dir))
        if (entry->d_name[0] != '.') highest = std::max(highest, std::atoi(entry->d_name));
      ::closedir(dir);
    }
    rlimit lowered = saved_;
    lowered.rlim_cur = static_cast<rlim_t>(highest) + 1;
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &lowered) == 0);
    take_free_numbers();
    // A descriptor another thread of the process held open for a moment
    // while the numbers were counted (the highest, say) is free again once
    // it closes it: that number is taken too, after a pause.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    take_free_numbers();
  }
  /// Whether the last attempt to open a descriptor failed with EMFILE.
  bool exhausted() const { return exhausted_; }
  ~descriptors_exhausted() {
    for (const int fd : taken_) ::close(fd);
    ::setrlimit(RLIMIT_NOFILE, &saved_);
  }
  descriptors_exhausted(const descriptors_exhausted&) = delete;
  descriptors_exhausted& operator=(const descriptors_exhausted&) = delete;

private:
  void take_free_numbers() {
    for (;;) {
      const int copy = ::dup(STDERR_FILENO);
      if (copy < 0) {
        exhausted_ = errno == EMFILE;
        return;
      }
      taken_.push_back(copy);
    }
  }

private:
  rlimit saved_{};
  std::vector<int> taken_;
  bool exhausted_ = false;
};

/// Opens `cap` connections to the server on `port`, which fill it to its cap,
/// and sends `request` on one more: checks that the server neither accepts
/// that one nor spins (less than 200 ms of CPU in a second) while they stay,
/// and that it is served once one of them leaves. `open_connections` reads
/// the server's count of connections.
inline void check_waiting_at_cap(unsigned short port, std::size_t cap, std::string_view request,
                                 const std::function<std::size_t()>& open_connections) {
  std::vector<std::unique_ptr<raw_connection>> hogs;
  for (std::size_t i = 0; i < cap; ++i) hogs.push_back(std::make_unique<raw_connection>(port));
  REQUIRE(coretry::test::eventually([&] { return open_connections() == cap; }, 3s));

  raw_connection waiting{port}; // completes in the kernel's backlog
  REQUIRE(waiting.send(request));
  const auto cpu = cpu_used_over(1s);
  CHECK(waiting.read_response(300ms).empty()); // not accepted while at the cap
  CHECK(open_connections() == cap);
  CHECK(cpu < 200ms);

  hogs.pop_back();
  CHECK(waiting.read_response(3s).starts_with("HTTP/1.1 200 "));
}

/// An idle keep-alive flood against a server whose cap is 8: 12 connections
/// that each send `request` (the first 8 are answered; the second oldest then
/// begins a next request), then a new client that must be answered within
/// 2 s. Checks that `idle_closed()` reaches 5 (four flood connections and the
/// new client admitted), that the oldest idle ones were closed, sparing the
/// one in the middle of a request, which is still answered, and that no
/// more than 8 stay open.
inline void check_idle_flood(unsigned short port, const std::string& request,
                             const std::function<std::size_t()>& open_connections,
                             const std::function<std::uint64_t()>& idle_closed) {
  std::vector<std::unique_ptr<raw_connection>> flood;
  for (int i = 0; i < 12; ++i) {
    flood.push_back(std::make_unique<raw_connection>(port));
    REQUIRE(flood.back()->send(request));
    if (i < 8) REQUIRE(flood.back()->read_response(3s).starts_with("HTTP/1.1 200 "));
    // The second oldest is in the middle of its next request: never closed for room.
    if (i == 1) REQUIRE(flood.back()->send(request.substr(0, request.find("\r\n") + 2)));
  }

  raw_connection client{port};
  const auto start = clock::now();
  REQUIRE(client.send(request));
  CHECK(client.read_response(2s).starts_with("HTTP/1.1 200 "));
  CHECK(clock::now() - start < 2s);
  for (std::size_t i = 8; i < 12; ++i) CHECK(flood[i]->read_response(1s).starts_with("HTTP/1.1 200 "));
  CHECK(coretry::test::eventually([&] { return idle_closed() == 5; }, 3s));
  // Closed by now: one that is shows at once. Under load two connections
  // answered in turn may become idle in the other order, so only the count,
  // the oldest and the newest are fixed.
  std::vector<int> closed;
  std::string closed_list;
  for (int i = 0; i < 8; ++i)
    if (i != 1 && flood[static_cast<std::size_t>(i)]->wait_for_end(300ms).closed) {
      closed.push_back(i);
      closed_list += std::to_string(i) + " ";
    }
  CAPTURE(closed_list);
  CHECK(closed.size() == 5);
  CHECK((!closed.empty() && closed.front() == 0));
  CHECK((!closed.empty() && closed.back() < 7));
  REQUIRE(flood[1]->send("Host: x\r\n\r\n"));
  CHECK(flood[1]->read_response(2s).starts_with("HTTP/1.1 200 "));
  CHECK(open_connections() <= 8);
}

/// A client that never reads: a 1 KiB receive window, set before it
/// connects to `port`, and four pipelined `request`s whose answers (several
/// KB each) do not fit it. Returns once they are sent.
inline std::unique_ptr<raw_connection> never_reading_client(unsigned short port, const std::string& request) {
  auto reader = std::make_unique<raw_connection>(port, false);
  reader->receive_buffer(1024);
  reader->connect();
  REQUIRE(reader->send(request + request + request + request));
  return reader;
}

/// Whether a test may run the process out of descriptors here; skips it
/// (skip.hpp) under the sanitizers, whose runtime opens a pipe to check a
/// polymorphic call it has not seen before and, with no descriptor free,
/// reports the call as bad.
inline bool can_run_out_of_descriptors() {
  if (!sanitized) return true;
  coretry::test::skip_test("the sanitizer runtime needs free descriptors; runs in the dev and release presets");
  return false;
}

/// Connects to the server on `port` and sends `request` while the process
/// can open no descriptor, so that every accept of the server's fails with
/// EMFILE: checks that the server neither answers nor spins meanwhile (less
/// than 250 ms of CPU in a second), then returns what it answers once
/// descriptors are free again (within 3 s; empty if nothing).
inline std::string request_while_out_of_descriptors(unsigned short port, std::string_view request) {
  raw_connection blocked{port, false};
  bool exhausted = false, sent = false, served_meanwhile = true;
  std::chrono::microseconds cpu{};
  {
    const descriptors_exhausted no_descriptors;
    exhausted = no_descriptors.exhausted();
    // In the backlog; each accept fails with EMFILE.
    sent = blocked.try_connect() && blocked.send(request);
    cpu = cpu_used_over(1s);
    served_meanwhile = !blocked.read_response(100ms).empty();
  }
  REQUIRE(exhausted);
  REQUIRE(sent);
  CHECK(cpu < 250ms);
  CHECK_FALSE(served_meanwhile);
  return blocked.read_response(3s);
}

/// The request line and header of a chunked POST whose first chunk-size line
/// then never ends: `1;x=` followed by endless 'a's.
inline constexpr std::string_view endless_chunk_extension_start =
    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;x=";

/// Sends the endless chunk extension, up to `most` bytes of it, and returns
/// how the server ended the exchange; checks the process grew by less than
/// `growth_bound_kib` (not under sanitizers, whose allocator keeps memory).
inline ending send_endless_chunk_extension(raw_connection& connection, std::size_t most, long growth_bound_kib) {
  const long before = resident_kib();
  const auto start = clock::now();
  connection.send(endless_chunk_extension_start);
  const std::string block(64 * 1024, 'a');
  std::size_t sent = 0;
  while (sent < most && connection.send(block, 1s)) sent += block.size();
  ending end = connection.wait_for_end(3s);
  end.elapsed = clock::now() - start;
  const long growth = resident_kib() - before;
  INFO("bytes of extension sent: ", sent, "; resident memory growth: ", growth, " KiB");
  CHECK(sent < most); // the server stopped taking them
  if (!sanitized) CHECK(growth < growth_bound_kib);
  return end;
}

} // namespace hostile

#endif
