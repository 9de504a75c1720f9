#ifndef CORETRY_SRC_HTTP_EXCHANGE_MACHINE_HPP
#define CORETRY_SRC_HTTP_EXCHANGE_MACHINE_HPP

// One request and its response on a connection, without I/O: the rules of
// the exchange as a state machine. It is told what an operation did (bytes
// written, bytes read, an error, the end of the stream) and answers what to
// do next: write these bytes, read more into this space, try again on a
// fresh connection (a reused one the server had closed), keep or close the
// connection, done. It owns the request's head (written into the
// connection's room for it), the parsing of the response within its bounds
// (response_reading.hpp's steps), interim responses, keep-alive, the
// decision about a stale reused connection, and the caller's validation of
// the final response. What it learns goes into the attempt's exchange;
// clocks, phases, the pool and cancellation are its driver's
// (attempt_op.cpp). Internal to coretry::http.

#include <coretry/http/exchange.hpp>

#include "request_head.hpp"
#include "streamed_body.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/system/error_code.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace coretry::http::detail {

/// The errors of a connection the server had closed before the request.
bool closed_by_peer(const boost::system::error_code& ec);

/// The most room a connection keeps for the next request's head.
inline constexpr std::size_t max_kept_head = 16 * 1024;

/// What an exchange follows besides its connection: the bounds of a
/// response (client_options) and the request's own rules.
struct exchange_rules {
  std::uint32_t header_limit = 8 * 1024;
  std::uint64_t body_limit = 8 * 1024 * 1024;
  unsigned max_interim = 8; ///< interim responses skipped before the final one
  /// Bodies the caller takes piece by piece; null (or not enabled): kept in
  /// memory up to body_limit.
  const body_streaming* streaming = nullptr;
  /// May be sent again when a reused connection turns out closed before any
  /// answer (idempotent or keyed).
  bool repeatable = false;
  /// The caller's check of a 2xx response; null or empty: none.
  const std::function<std::optional<std::string>(const response&)>* validate = nullptr;
  /// What the head adds to a request that lacks it.
  added_fields added;
};

/// What the driver does next.
struct exchange_action {
  enum class kind {
    write,            ///< write all of `out`, then written()
    read,             ///< read some bytes into `in`, then read()
    retry_fresh,      ///< a stale reused connection: drop it, start again on another (or retry_refused())
    keep_connection,  ///< give the connection back for another request, then released()
    close_connection, ///< close the connection, then released()
    done,             ///< the exchange holds the outcome
  };
  kind next = kind::done;
  std::array<boost::asio::const_buffer, 3> out{};
  boost::asio::mutable_buffer in{};
  bool answered = false; ///< the first byte of an answer came with this event
  bool complete = false; ///< the final response was read with this event
};

class exchange_machine {
public:
  /// `x` receives what happens: how far the exchange got, bytes written,
  /// the response, the error, the validation's problem.
  exchange_machine(const exchange_rules& rules, exchange& x) : rules_(rules), x_(x) {}

  /// Begins the exchange of `req` on a connection (`reused`: one from the
  /// pool): its head goes into `head`, its response is read through
  /// `buffer` (bounded by its max_size). All three outlive the exchange.
  exchange_action start(const request& req, boost::beast::flat_buffer& buffer, std::string& head, bool reused);

  /// The write ended: `n` bytes of it written, `ec` its error.
  exchange_action written(const boost::system::error_code& ec, std::size_t n);

  /// A read ended: `n` bytes arrived in the space asked for; asio's eof is
  /// the end of the stream.
  exchange_action read(const boost::system::error_code& ec, std::size_t n);

  /// The next operation could not start (the attempt was cancelled, say);
  /// also before start(), when there is no connection to exchange on yet.
  exchange_action failed(const boost::system::error_code& ec) { return end(ec); }

  /// The driver does not retry after all (it was cancelled): the connection
  /// is closed and the exchange ends with the error it had.
  exchange_action retry_refused() { return {exchange_action::kind::close_connection}; }

  /// The connection was kept or closed.
  exchange_action released();

  /// A byte of an answer arrived (of an interim response too).
  bool answered() const noexcept { return answered_; }

private:
  exchange_action next_response();
  exchange_action parse_or_read();
  exchange_action response_done();
  exchange_action end(const boost::system::error_code& ec);

  exchange_rules rules_;
  exchange& x_;
  const request* req_ = nullptr;
  boost::beast::flat_buffer* buffer_ = nullptr;
  std::string* head_ = nullptr;
  std::optional<boost::beast::http::response_parser<streamed_body>> parser_;
  unsigned interim_ = 0;    ///< interim responses skipped so far
  bool reused_ = false;     ///< the connection came from the pool
  bool answered_ = false;   ///< a byte of a response arrived
  bool keep_alive_ = false; ///< the connection may carry another request
};

} // namespace coretry::http::detail

#endif
