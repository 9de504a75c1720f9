#ifndef CORETRY_TESTS_HTTP_HOSTILE_SERVER_HPP
#define CORETRY_TESTS_HTTP_HOSTILE_SERVER_HPP

// A raw-socket server on 127.0.0.1 (a free port) whose every connection runs
// a script on its own thread: for servers that misbehave on purpose (endless
// lines, answers nobody asked for), which no HTTP library would write.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <poll.h>
#include <sys/socket.h>

namespace coretry_tests {

class hostile_server {
public:
  /// One accepted connection, as its script sees it.
  class peer {
  public:
    peer(hostile_server& server, boost::asio::ip::tcp::socket socket, int index)
        : index(index), server_(server), socket_(std::move(socket)) {}

    /// Reads one request (its head, and a body announced by Content-Length)
    /// and logs it in the server; false when the client closed first.
    bool read_request() {
      std::size_t end;
      while ((end = pending_.find("\r\n\r\n")) == std::string::npos)
        if (!read_more()) return false;
      std::string head = pending_.substr(0, end + 4);
      pending_.erase(0, end + 4);
      std::size_t length = 0;
      for (std::string_view name : {"Content-Length: ", "content-length: "})
        if (const auto at = head.find(name); at != std::string::npos)
          length = std::strtoull(head.c_str() + at + name.size(), nullptr, 10);
      while (pending_.size() < length)
        if (!read_more()) return false;
      last_body = pending_.substr(0, length);
      pending_.erase(0, length);
      last_head = head;
      server_.log(head);
      return true;
    }

    /// The bytes up to and including the first `end`, taken from what the
    /// client sent after the last request read (a chunked body, say);
    /// empty when the client closed first.
    std::string read_through(std::string_view end) {
      std::size_t at;
      while ((at = pending_.find(end)) == std::string::npos)
        if (!read_more()) return {};
      std::string bytes = pending_.substr(0, at + end.size());
      pending_.erase(0, at + end.size());
      return bytes;
    }

    /// Writes all of `bytes`; false once the client is gone.
    bool send(std::string_view bytes) {
      boost::system::error_code ec;
      boost::asio::write(socket_, boost::asio::buffer(bytes.data(), bytes.size()), ec);
      return !ec;
    }

    /// Reads (and drops) until the client closes the connection.
    void wait_for_close() {
      while (read_more()) pending_.clear();
    }

    /// A proxy's tunnel: connects to 127.0.0.1:`port` and copies bytes both
    /// ways (what was read beyond the last request first) until either side
    /// closes; false when the origin cannot be reached.
    bool tunnel_to(unsigned short port) {
      boost::asio::ip::tcp::socket origin(socket_.get_executor());
      boost::system::error_code ec;
      origin.connect({boost::asio::ip::make_address("127.0.0.1"), port}, ec);
      if (ec) return false;
      if (!pending_.empty()) boost::asio::write(origin, boost::asio::buffer(pending_), ec);
      pending_.clear();
      pollfd ends[2] = {{socket_.native_handle(), POLLIN, 0}, {origin.native_handle(), POLLIN, 0}};
      char buffer[16384];
      while (!ec && ::poll(ends, 2, 10000) > 0) {
        for (int i = 0; i < 2 && !ec; ++i) {
          if (ends[i].revents == 0) continue;
          auto& from = i == 0 ? socket_ : origin;
          auto& to = i == 0 ? origin : socket_;
          const std::size_t n = from.read_some(boost::asio::buffer(buffer), ec);
          if (!ec) boost::asio::write(to, boost::asio::buffer(buffer, n), ec);
        }
      }
      return true;
    }

    /// Ends the connection (an orderly FIN); the descriptor stays open until
    /// the server goes, so no other thread ever sees it reused.
    void close() { ::shutdown(socket_.native_handle(), SHUT_RDWR); }

    const int index; ///< 0 for the first connection accepted
    /// The head and the Content-Length body of the last request read.
    std::string last_head;
    std::string last_body;

  private:
    friend class hostile_server;
    bool read_more() {
      char buffer[4096];
      boost::system::error_code ec;
      const std::size_t n = socket_.read_some(boost::asio::buffer(buffer), ec);
      if (ec) return false;
      pending_.append(buffer, n);
      return true;
    }

    hostile_server& server_;
    boost::asio::ip::tcp::socket socket_;
    std::string pending_;
  };

  using script = std::function<void(peer&)>;

  /// Every connection runs `s`.
  explicit hostile_server(script s) : hostile_server(std::vector<script>{std::move(s)}) {}
  /// Connection i runs scripts[i]; connections past the last run the last.
  explicit hostile_server(std::vector<script> scripts) : hostile_server(std::move(scripts), "127.0.0.1", 0) {}
  /// Listens on `address` (127.0.0.2, ::1, ...) and `port` (0: a free one).
  /// Throws boost::system::system_error when it cannot bind.
  hostile_server(std::vector<script> scripts, const std::string& address, unsigned short port)
      : acceptor_(io_, {boost::asio::ip::make_address(address), port}), scripts_(std::move(scripts)) {
    accepting_ = std::thread([this] { accept_loop(); });
  }

  ~hostile_server() {
    stopping_ = true;
    {
      // Wakes the blocking accept.
      boost::system::error_code ignored;
      boost::asio::ip::tcp::socket knock(io_);
      knock.connect(acceptor_.local_endpoint(), ignored);
      accepting_.join();
    }
    std::lock_guard lock(mutex_);
    for (auto& p : peers_) p->close();
    for (auto& t : threads_) t.join();
  }

  hostile_server(const hostile_server&) = delete;
  hostile_server& operator=(const hostile_server&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }
  unsigned short port() const { return acceptor_.local_endpoint().port(); }
  int connections() const { return accepted_.load(); }
  /// The heads of the requests read so far, in arrival order.
  std::vector<std::string> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }

private:
  void accept_loop() {
    for (;;) {
      boost::system::error_code ec;
      boost::asio::ip::tcp::socket socket(io_);
      acceptor_.accept(socket, ec);
      if (stopping_ || ec) return;
      const int index = accepted_++;
      std::lock_guard lock(mutex_);
      peers_.push_back(std::make_unique<peer>(*this, std::move(socket), index));
      peer* p = peers_.back().get();
      const script& s = scripts_[std::min<std::size_t>(index, scripts_.size() - 1)];
      threads_.emplace_back([p, &s] {
        s(*p);
        p->close();
      });
    }
  }

  void log(std::string head) {
    std::lock_guard lock(mutex_);
    requests_.push_back(std::move(head));
  }

  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::vector<script> scripts_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<peer>> peers_;
  std::vector<std::thread> threads_;
  std::vector<std::string> requests_;
  std::thread accepting_;
};

} // namespace coretry_tests

#endif
