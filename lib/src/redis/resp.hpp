// One Redis connection of coretry's own: an Asio TCP socket, or Asio's SSL
// stream over one (rediss://), with hiredis's
// command formatter and RESP reader. Every step is an awaitable that honours
// terminal cancellation (run it under coretry::async_with_deadline), and
// every reply is bounded before it is built.
#ifndef CORETRY_REDIS_RESP_HPP
#define CORETRY_REDIS_RESP_HPP

#include <coretry/redis/url.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct redisReader;

namespace coretry::redis::detail {

/// One reply, built by the reader (no hiredis object outlives a read).
struct reply {
  enum class kind { string, array, integer, nil, status, error };
  kind type = kind::nil;
  long long integer = 0;
  std::string text; ///< string, status, error
  std::vector<reply> elements;
};

/// The largest reply accepted (bytes on the wire), and the most elements of
/// one array: coretry's replies are a few integers.
constexpr std::size_t max_reply_bytes = 64 * 1024;
constexpr int max_array_elements = 64;
/// The most elements of all of one reply's arrays together.
constexpr int max_reply_elements = 256;

/// `text` cut to 200 bytes, control and non-ASCII bytes as '?': what a
/// server says, fit to be printed.
std::string printable(std::string_view text);

/// A hostile or broken server: the connection is unusable after it.
class protocol_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class connection {
public:
  /// `tls`: the context of rediss:// endpoints (none: open() refuses them);
  /// it must outlive the connection.
  explicit connection(boost::asio::any_io_executor ex, boost::asio::ssl::context* tls = nullptr);
  ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  /// Looks `at` up, connects, shakes hands over TLS when `at.tls` (the
  /// server's certificate verified against `at.host`), and logs in (AUTH,
  /// then SELECT when the database is not 0). Throws system_error (network)
  /// or protocol_error (a failed handshake, by its reason; the server
  /// refused: the message names the refusal, never the password).
  boost::asio::awaitable<void> open(const endpoint& at);
  /// Sends one command and reads its reply (an error reply is a reply).
  boost::asio::awaitable<reply> command(const std::vector<std::string>& args);
  /// Completes when the socket turns readable (between commands: Redis
  /// closed it, or sent what nobody asked for): a byte waits (on the socket,
  /// or already taken off it by the TLS layer), or the peer
  /// closed, or the socket failed; a spent readiness is waited past. Throws
  /// system_error when the wait fails.
  boost::asio::awaitable<void> wait_readable();
  /// Closes the socket; open() may be called again.
  void close() noexcept;
  bool is_open() const noexcept { return tls_ ? tls_->next_layer().is_open() : socket_.is_open(); }
  /// Whether open() is in its TLS handshake (until close()).
  bool handshaking() const noexcept { return handshaking_; }

private:
  using tls_stream = boost::asio::ssl::stream<boost::asio::ip::tcp::socket>;
  void reset_reader();
  boost::asio::ip::tcp::socket& lowest() noexcept { return tls_ ? tls_->next_layer() : socket_; }
  boost::asio::ssl::context* tls_context_;
  boost::asio::ip::tcp::socket socket_; ///< plain; moved into tls_ for TLS
  std::unique_ptr<tls_stream> tls_;     ///< the open TLS connection
  bool handshaking_ = false;
  struct reader_deleter {
    void operator()(redisReader* r) const noexcept;
  };
  std::unique_ptr<redisReader, reader_deleter> reader_;
  int elements_ = 0; ///< array elements of the reply being read (the reader's privdata)
};

} // namespace coretry::redis::detail

#endif
