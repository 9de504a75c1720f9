#ifndef CORETRY_SERVING_SERVING_HPP
#define CORETRY_SERVING_SERVING_HPP

// Serving HTTP/1.1 to clients that may be hostile, shared by the fault server
// and the bookstore:
//
// - read_request_header / read_request_body read one request with every
//   dimension bounded: header bytes, body bytes, and the read buffer, which is
//   what bounds chunk-size lines, chunk extensions and trailers (Beast's
//   parser limits neither); the header must arrive within header_timeout of
//   the connection (or of the first byte of a later request), the body within
//   header_timeout of the end of the header, and a kept-alive connection may
//   stay silent between requests for keep_alive_timeout.
// - wait_until_sent bounds the other direction: a response counts as taken
//   only once its bytes have left the socket (not merely the process), and
//   must be within send_timeout of its first write; until then the
//   connection reads no further request and is not idle.
// - connection_gate caps the open connections and pauses the accept loop
//   after an accept error such as EMFILE instead of spinning on it. At the
//   cap it closes the connection idle the longest (kept alive, its last
//   response taken, no byte of a next request received) to admit a new
//   client; with none idle, new connections wait in the listen backlog.
//
// Timeouts need the stream's lowest layer to be a beast::tcp_stream.

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/parser.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace coretry::serving {

struct request_limits {
  /// Request line and header fields together.
  std::size_t header_bytes = 8 * 1024;
  /// The body, after any chunked framing is removed.
  std::size_t body_bytes = 1024 * 1024;
  /// The read buffer's maximum: a chunk-size line (with its extensions) or
  /// the trailer section must fit in it. At least header_bytes.
  std::size_t buffer_bytes = 16 * 1024;
  /// The header must have arrived this long after the connection was
  /// accepted or the request's first byte arrived; the body, this long after
  /// the header.
  std::chrono::milliseconds header_timeout{10'000};
  /// How long a kept-alive connection may stay silent between requests.
  std::chrono::milliseconds keep_alive_timeout{30'000};
  /// A response must have left the socket (the peer has taken it into its
  /// receive window) this long after its first byte was written; otherwise
  /// the connection is reset. Until then the connection reads no next
  /// request and is not idle.
  std::chrono::milliseconds send_timeout{10'000};
};

/// The limits' largest accepted values; validate() names any value outside.
inline constexpr std::size_t most_header_bytes = 1024 * 1024;
inline constexpr std::chrono::milliseconds longest_timeout{24 * 3600 * 1000};

/// A description of the first bad value, or nullopt.
std::optional<std::string> validate(const request_limits& limits);

/// How reading a request ended.
enum class read_outcome {
  complete,         ///< a request (header, or header and body) was read
  closed,           ///< the peer closed or reset the connection, or the server stopped
  idle_timeout,     ///< no request began within keep_alive_timeout
  header_timeout,   ///< the header (or the body) did not arrive in time
  header_too_large, ///< answered 431
  body_too_large,   ///< answered 413 (a body over the limit, or a chunk line or trailer over the buffer)
  malformed,        ///< answered 400
};

/// A name for metrics: "closed", "idle_timeout", "header_timeout",
/// "header_too_large", "body_too_large" or "malformed".
std::string_view to_string(read_outcome outcome);

/// The status to answer with (431, 413 or 400), or 0 when the connection is
/// just closed.
unsigned status_for(read_outcome outcome);

/// A plain-text explanation to send with status_for(outcome).
std::string explain(read_outcome outcome, const request_limits& limits);

/// What a failed read means; `header_done` says whether the header had been
/// parsed. `error` must not be success.
read_outcome classify(const boost::system::error_code& error, bool header_done);

/// What a connection's idleness is told: true when it starts waiting for a
/// next request with no byte of it received, false when that wait ends.
/// Called on the stream's executor.
using idle_observer = std::function<void(bool idle)>;

/// The read buffer for a connection, bounded by limits.buffer_bytes.
inline boost::beast::flat_buffer make_buffer(const request_limits& limits) {
  return boost::beast::flat_buffer{std::max(limits.buffer_bytes, limits.header_bytes)};
}

/// Prepares `parser` for one request within `limits`.
template <class Body, class Allocator>
void apply_limits(boost::beast::http::request_parser<Body, Allocator>& parser, const request_limits& limits) {
  parser.header_limit(static_cast<std::uint32_t>(limits.header_bytes));
  parser.body_limit(limits.body_bytes);
}

/// Reads a request's header into `parser` (apply_limits first). On a
/// kept-alive connection (`first` false) with no bytes buffered, waits up to
/// keep_alive_timeout for the request to begin, telling `on_idle` (if any)
/// when that wait starts and ends: only then may the connection be closed to
/// make room. Leaves the stream's timeout off on return.
template <class Stream, class Parser>
boost::asio::awaitable<read_outcome> read_request_header(Stream& stream, boost::beast::flat_buffer& buffer,
                                                         Parser& parser, const request_limits& limits, bool first,
                                                         const idle_observer& on_idle = {}) {
  namespace asio = boost::asio;
  namespace beast = boost::beast;
  constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);
  beast::tcp_stream& lowest = beast::get_lowest_layer(stream);
  struct timeout_off {
    beast::tcp_stream& stream;
    ~timeout_off() { stream.expires_never(); }
  } const off{lowest};

  if (!first && buffer.size() == 0) {
    // Idle until the next request's first bytes.
    lowest.expires_after(limits.keep_alive_timeout);
    const std::size_t room = std::min<std::size_t>(buffer.max_size(), 4096);
    if (on_idle) on_idle(true);
    auto [error, bytes] = co_await stream.async_read_some(buffer.prepare(room), nothrow);
    if (on_idle) on_idle(false);
    if (error) {
      const read_outcome outcome = classify(error, false);
      co_return outcome == read_outcome::header_timeout ? read_outcome::idle_timeout : outcome;
    }
    buffer.commit(bytes);
  }
  lowest.expires_after(limits.header_timeout);
  auto [error, bytes] = co_await beast::http::async_read_header(stream, buffer, parser, nothrow);
  if (error) co_return classify(error, false);
  co_return read_outcome::complete;
}

/// Reads the rest of the request whose header read_request_header read.
template <class Stream, class Parser>
boost::asio::awaitable<read_outcome> read_request_body(Stream& stream, boost::beast::flat_buffer& buffer,
                                                       Parser& parser, const request_limits& limits) {
  namespace asio = boost::asio;
  namespace beast = boost::beast;
  if (parser.is_done()) co_return read_outcome::complete;
  beast::tcp_stream& lowest = beast::get_lowest_layer(stream);
  lowest.expires_after(limits.header_timeout);
  auto [error, bytes] = co_await beast::http::async_read(stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
  lowest.expires_never();
  if (error) co_return classify(error, true);
  co_return read_outcome::complete;
}

/// Bytes written to the socket that have not yet left it: on Linux the
/// unsent part of the TCP send queue (SIOCOUTQNSD, like tcpi_notsent_bytes),
/// which stays above 0 while the peer's receive window is closed. 0 where
/// the system does not say, or for a closed socket.
std::size_t unsent_bytes(boost::asio::ip::tcp::socket& socket);

/// Between two looks at the send queue: the first look is at once, then
/// after 1 ms, doubling up to this.
inline constexpr std::chrono::milliseconds longest_send_poll{50};

/// How long a response may stay stalled (none of its bytes leaving the
/// socket) while the server is at its cap and new clients wait in the
/// backlog: then it is given up before its send timeout, since it holds a
/// place others need. A reader that takes its bytes, however slowly, is not
/// stalled for long.
inline constexpr std::chrono::milliseconds longest_stall_when_full{1000};

/// Whether a connection waits in the backlog of the listening socket
/// `listener` (it is readable), without accepting it.
bool clients_waiting(int listener);

/// After a response's last write: waits until every byte written to
/// `socket` has left it, looking at the send queue at once and then at
/// growing intervals (up to longest_send_poll), until `deadline`. True once
/// the queue is empty; false at the deadline, if the socket closes, or once
/// `give_up(stalled)` is true (asked at each look, `stalled` the time since
/// the unsent bytes last decreased).
template <class GiveUp>
boost::asio::awaitable<bool> wait_until_sent(boost::asio::ip::tcp::socket& socket,
                                             std::chrono::steady_clock::time_point deadline, GiveUp give_up) {
  namespace asio = boost::asio;
  std::chrono::milliseconds interval{1};
  std::optional<asio::steady_timer> timer;
  std::size_t least_unsent = SIZE_MAX;
  auto progressed = std::chrono::steady_clock::now();
  for (;;) {
    if (!socket.is_open()) co_return false;
    const std::size_t unsent = unsent_bytes(socket);
    if (unsent == 0) co_return true;
    const auto now = std::chrono::steady_clock::now();
    if (unsent < least_unsent) {
      least_unsent = unsent;
      progressed = now;
    }
    if (now >= deadline || give_up(now - progressed)) co_return false;
    if (!timer) timer.emplace(co_await asio::this_coro::executor);
    timer->expires_at(std::min(deadline, now + interval));
    co_await timer->async_wait(asio::as_tuple(asio::use_awaitable));
    interval = std::min(interval * 2, longest_send_poll);
  }
}

/// Closes `socket` with a reset, dropping whatever it still holds to send:
/// for a peer that did not take its response in time, whose unsent bytes
/// would otherwise stay in the kernel after the close.
void reset(boost::asio::ip::tcp::socket& socket);

/// How long the accept loop pauses after an accept error (EMFILE, ENFILE,
/// ENOBUFS...), so that a listening socket that stays readable is not spun on.
inline constexpr std::chrono::milliseconds accept_error_pause{100};

/// The cap on open connections, for an accept loop and its connections that
/// all call it from one strand (or one thread).
///
/// At the cap, a connection that is idle (kept alive, its last response
/// taken, waiting for a next request with no byte of it received) may be
/// closed to admit a new client: the one idle the longest, once the new
/// connection is accepted. So at most one more than the cap is open, for as
/// long as an idle connection takes to close. A connection in the middle of
/// a request, or before the end of its first, is never closed for this.
class connection_gate {
public:
  /// Closes an idle connection to make room; runs on the gate's strand. The
  /// connection may have left idleness meanwhile (on another strand): then
  /// it stays open and the closer calls not_closed().
  using closer = std::function<void()>;

  template <class Executor>
  connection_gate(const Executor& executor, std::size_t max_open) : room_(executor), max_open_(max_open) {}

  /// Returns once fewer than the cap are open, or an idle connection can be
  /// closed to make room for the next one accepted (at once if so), or false
  /// if close() was called meanwhile.
  boost::asio::awaitable<bool> wait_for_room();
  /// After an accept error: pauses for accept_error_pause, except after a
  /// connection its client aborted before it was accepted (which says
  /// nothing about the server, and a pause would let such clients slow
  /// everyone's accepts). False if close() was called meanwhile.
  boost::asio::awaitable<bool> pause_after_accept_error(const boost::system::error_code& error);

  /// A connection was accepted. Beyond the cap, closes the connection idle
  /// the longest.
  void opened();
  /// Wakes the accept loop if it waits for room.
  void closed();
  /// Connection `id` is idle; `close` closes it. Replaces any earlier entry.
  void idle(std::uint64_t id, closer close);
  /// Connection `id` is no longer idle (or was never); forgets it.
  void not_idle(std::uint64_t id);
  /// The idle connection a closer was called for did not close (a request
  /// had begun): look for another.
  void not_closed();
  /// Idle connections known now.
  std::size_t idle_count() const { return idle_.size(); }
  /// Ends any wait; later waits return false at once.
  void close();

  std::size_t open() const { return open_; }
  std::size_t max_open() const { return max_open_; }

private:
  void wake() {
    if (waiting_for_room_) room_.cancel();
  }

  boost::asio::steady_timer room_;
  std::size_t max_open_;
  std::size_t open_ = 0;
  bool closed_ = false;
  bool waiting_for_room_ = false;
  bool closing_idle_ = false; ///< a closer was called and its connection has not closed yet
  /// Idle connections, idle the longest first; at most one per open connection.
  std::list<std::pair<std::uint64_t, closer>> idle_;
  std::unordered_map<std::uint64_t, std::list<std::pair<std::uint64_t, closer>>::iterator> idle_index_;
};

} // namespace coretry::serving

#endif
