#ifndef CORETRY_HTTP_EXCHANGE_HPP
#define CORETRY_HTTP_EXCHANGE_HPP

#include <coretry/phases.hpp>
#include <coretry/outcome.hpp>
#include <coretry/http/redirect.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coretry::http {

using request = boost::beast::http::request<boost::beast::http::string_body>;
using response = boost::beast::http::response<boost::beast::http::string_body>;

/// How far one attempt got. Everything before `writing` provably never
/// reached the server.
enum class stage {
  waiting_for_connection, ///< for a pooled connection or a permit to open one
  resolving,
  connecting,
  handshaking,
  writing,
  reading,
  complete,
};

std::string_view to_string(stage s) noexcept;

/// The connection pool's refusals of an attempt waiting for a connection
/// (every one of its origin's max_connections_per_origin leased).
enum class pool_error {
  /// Less time was left before the attempt's deadline than that origin's
  /// exchanges lately take: refused at once, before anything was sent,
  /// rather than handed a connection it would most likely give up on
  /// mid-way. Transient, never sent, a sign of overload ("pool_too_late").
  too_late = 1,
};

const boost::system::error_category& pool_error_category() noexcept;
boost::system::error_code make_error_code(pool_error e) noexcept;

/// What one attempt did. Kept after the attempt's connection is released, so
/// the caller can diagnose without holding any transport resource.
struct exchange {
  /// The complete response, when one arrived in time.
  std::optional<response> res;
  /// The transport failure, if any (the attempt's deadline shows up in the
  /// retry record as attempt_error::timed_out).
  boost::system::error_code error;
  stage reached = stage::waiting_for_connection;
  bool reused_connection = false;
  /// The address of the connection the attempt used (through a proxy: the
  /// proxy's), none when it got no connection.
  std::optional<boost::asio::ip::tcp::endpoint> address;
  /// Where the attempt's time went: waiting for a connection, lookup,
  /// connect, TLS handshake, writing, waiting for the first byte, reading.
  phase_timings phases;
  /// Bytes of the request written before the attempt ended.
  std::size_t bytes_written = 0;
  /// Local wall-clock time the response was complete: the reference for an
  /// HTTP-date Retry-After when the response carries no Date header.
  std::chrono::system_clock::time_point received_at{};
  /// The Idempotency-Key this attempt carried (the same on every attempt of
  /// one logical request), empty when it carried none.
  std::string idempotency_key;
  /// The proxy this attempt went through (redacted: no credentials), empty
  /// when it went directly.
  std::string proxy;
  /// The status of the proxy's refusal to open a tunnel (error
  /// proxy_error::refused), 0 otherwise.
  unsigned proxy_status = 0;
  /// A permanent problem found on this side: the response-validation hook's
  /// complaint, a request body that could not be reproduced, or a redirect
  /// not followed (redirect_error).
  std::string problem;
  /// The redirects followed before this exchange, the first first
  /// (request_options::redirects); empty when none was.
  std::vector<redirect_hop> redirects;
};

/// The result of one logical request: the engine's outcome, whose `value` is
/// the last attempt's exchange (its response, if it got one).
using result = coretry::outcome<exchange>;

} // namespace coretry::http

template <>
struct boost::system::is_error_code_enum<coretry::http::pool_error> : std::true_type {};

/// An HTTP attempt's connection: reused from the pool, opened by the attempt
/// (it got past connecting), or none (it ended waiting for one, resolving or
/// connecting).
template <>
struct coretry::connection_of<coretry::http::exchange> {
  static connection_use get(const http::exchange& x) noexcept {
    if (x.reused_connection) return connection_use::reused;
    return x.reached > http::stage::connecting ? connection_use::fresh : connection_use::none;
  }
};

#endif
