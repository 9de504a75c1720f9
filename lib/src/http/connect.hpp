#ifndef CORETRY_SRC_HTTP_CONNECT_HPP
#define CORETRY_SRC_HTTP_CONNECT_HPP

// Connecting: what a connection is (plain TCP or TLS over TCP, with its
// bounded read buffer), the TLS context, the lookup that can be abandoned,
// and establishing a connection (lookup, TCP connect, TLS handshake).
// Internal to coretry::http.

#include <coretry/http/client_options.hpp>
#include <coretry/http/exchange.hpp>
#include <coretry/http/tls.hpp>

#include "address_health.hpp"
#include "pool.hpp"
#include "tunnel.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <variant>

namespace coretry::http::detail {

/// Where a request goes: the pool's key and what is looked up and verified.
struct origin {
  bool tls = false;
  std::string host;
  std::string port;
  /// "https://host:port": the pool's key, shared by the requests to one
  /// origin (client_state::key_of) rather than made for each.
  std::shared_ptr<const std::string> key;
  /// The proxy this origin is reached through; null: directly.
  std::shared_ptr<const proxy_route> proxy;
};

/// A cancellation that arrives between two operations is recorded in the
/// coroutine's state but reaches neither: check it before starting each one,
/// or an attempt could wait forever on a server that never answers.
inline bool cancellation_requested(const boost::asio::cancellation_state& state) {
  return state.cancelled() != boost::asio::cancellation_type::none;
}

/// A connection: plain TCP or TLS over TCP, with its read buffer (which may
/// hold bytes of the next response only if the server misbehaved).
struct connection {
  using tcp = boost::asio::ip::tcp;
  using tls_stream = boost::asio::ssl::stream<tcp::socket>;

  explicit connection(tcp::socket socket) : stream(std::in_place_type<tcp::socket>, std::move(socket)) {}
  connection(tcp::socket socket, boost::asio::ssl::context& tls)
      : stream(std::in_place_type<tls_stream>, std::move(socket), tls) {}

  tcp::socket& socket();

  /// True when the server closed an idle connection or sent bytes nobody
  /// asked for (a 408, a body after a HEAD response, an early answer):
  /// checked without blocking before the connection is reused, whatever the
  /// request's method. Such bytes must never be read as the answer to a
  /// request written after them.
  bool is_stale();

  void close();

  std::variant<tcp::socket, tls_stream> stream;
  boost::beast::flat_buffer buffer;
  /// The head of the request being written (write_request_head): its room
  /// is kept for the connection's next request.
  std::string head;
  /// The address connected to (through a proxy: the proxy's).
  tcp::endpoint peer;
};

using connection_pool = basic_connection_pool<connection>;
using lease = connection_pool::lease;

/// The name whose addresses a connection to `where` goes to: the proxy's
/// when there is one.
inline name_and_port connection_target(const origin& where) {
  if (where.proxy) return {where.proxy->host, where.proxy->port};
  return {where.host, where.port};
}

/// The client's TLS context: TLS 1.2 at least, the system's trust store plus
/// an optional CA file, peer verification unless turned off, and a client
/// certificate when one is given. Made once, on first use: loading the system
/// trust store is costly, and a client that only speaks plain HTTP never
/// needs it.
class tls_context {
public:
  explicit tls_context(const client_options& options)
      : files_{options.ca_file, options.certificate_file, options.private_key_file, options.private_key_password},
        verify_peer_(options.verify_peer) {}

  /// Made once, on first use. Throws std::invalid_argument naming a file
  /// that cannot serve (tls_files_problem), boost::system::system_error when
  /// OpenSSL fails otherwise.
  boost::asio::ssl::context& get();

private:
  tls_files files_;
  bool verify_peer_;
  std::once_flag made_;
  std::optional<boost::asio::ssl::context> context_;
};

/// What establishing a connection uses of the client.
struct connect_context {
  tls_context& tls;
  connection_pool& pool;
  address_health& health;
  std::size_t buffer_limit; ///< of the new connection's read buffer
  std::uint32_t header_limit;
  duration attempt_delay; ///< client_options::connection_attempt_delay
};

/// Resolve (unless the addresses known are still good), connect (racing
/// the addresses, `first` (the balancer's pick) first and `avoid`ed ones
/// last, when there are several), open a
/// tunnel through the origin's proxy for https, and (for https) handshake:
/// everything before the request is written, so a failure here provably
/// never reached the server. The new connection is attached to `held`, its
/// read buffer bounded; `x.reached` says how far it got, `x.address` where
/// it went. Every operation looks for cancellation before it starts; a
/// lookup is abandoned (never waited for) when cancelled.
boost::asio::awaitable<boost::system::error_code> establish(const origin& where, const connect_context& c,
                                                            std::span<const boost::asio::ip::tcp::endpoint> avoid,
                                                            const std::optional<boost::asio::ip::tcp::endpoint>& first,
                                                            lease& held, exchange& x);

/// establish within `timeout` (client_options::connect_timeout; zero: no
/// limit of its own): asio::error::timed_out when it runs out. The attempt's
/// deadline reaches it as cancellation.
boost::asio::awaitable<boost::system::error_code> establish_within(
    const origin& where, const connect_context& c, std::span<const boost::asio::ip::tcp::endpoint> avoid,
    const std::optional<boost::asio::ip::tcp::endpoint>& first, lease& held, exchange& x, duration timeout);

} // namespace coretry::http::detail

#endif
