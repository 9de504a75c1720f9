#include "exchange_io.hpp"

#include "response_reading.hpp"

#include <coretry/with_deadline.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/write.hpp>

#include <tuple>

namespace coretry::http::detail {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast_http = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

bool closed_by_peer(const error_code& ec) {
  return ec == asio::error::eof || ec == beast_http::error::end_of_stream || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == ssl::error::stream_truncated;
}

namespace {

/// Reads one response into `parser`, one read of the stream at a time, and
/// looks for cancellation before each read: Beast's http::async_read (Boost
/// 1.81) starts its next read without looking, so a signal arriving between
/// two reads would be missed and the attempt would wait on a silent server.
/// With an idle limit, every read must bring something within it; the
/// attempt's deadline still bounds the whole.
template <class Stream>
asio::awaitable<error_code> read_response(const client_options& options, Stream& stream, connection& conn,
                                          beast_http::response_parser<streamed_body>& parser,
                                          const asio::cancellation_state& cancel_state, bool& answered,
                                          phase_timings& phases) {
  const auto ex = co_await asio::this_coro::executor;
  for (;;) {
    // Parse what is buffered: a header first, then as much body as there is.
    if (const error_code ec = parse_buffered(conn.buffer, parser)) co_return ec;
    if (parser.is_done()) co_return error_code{};
    if (cancellation_requested(cancel_state)) co_return asio::error::operation_aborted;

    const std::size_t size = next_read_size(conn.buffer);
    if (size == 0) co_return full_buffer_error(parser); // one unfinished line fills the bounded buffer
    const auto space = conn.buffer.prepare(size);
    error_code ec;
    std::size_t n = 0;
    if (options.idle_timeout == duration::zero()) {
      std::tie(ec, n) = co_await stream.async_read_some(space, asio::as_tuple(asio::use_awaitable));
    } else {
      // The read itself is the operation (no coroutine frame of its own):
      // its handler carries the deadline's cancellation slot to the socket.
      auto read_some = [&stream, space](auto handler) { stream.async_read_some(space, std::move(handler)); };
      auto done = co_await async_with_deadline<std::size_t>(
          ex, instant_after(asio::steady_timer::clock_type::now(), options.idle_timeout), read_some,
          asio::use_awaitable);
      if (done.exception) std::rethrow_exception(done.exception);
      ec = done.error == attempt_error::timed_out ? error_code(asio::error::timed_out) : done.error;
      if (done.value) n = *done.value;
    }
    conn.buffer.commit(n);
    if (n != 0 && !answered) {
      // The first byte of any response (an interim one included): the wait
      // for the server ends, the reading of the rest begins.
      answered = true;
      phases.enter(phase::read, phase_timings::clock::now());
    }
    if (ec == asio::error::eof) {
      // The server closed: that ends a body delimited by the connection's
      // end; anything else is cut short.
      if (!parser.got_some()) co_return beast_http::error::end_of_stream;
      ec = {};
      parser.put_eof(ec);
      co_return ec;
    }
    if (ec) co_return ec;
  }
}

/// `answered` tells whether any byte of a response arrived.
template <class Stream>
asio::awaitable<void> exchange_on(const client_options& options, Stream& stream, connection& conn, const request& req,
                                     const body_streaming& streaming, exchange& x, bool& keep_alive, bool& answered) {
  const auto cancel_state = co_await asio::this_coro::cancellation_state;
  x.reached = stage::writing;
  x.phases.enter(phase::write, phase_timings::clock::now());
  if (cancellation_requested(cancel_state)) {
    x.error = asio::error::operation_aborted;
    co_return;
  }
  auto [write_ec, written] = co_await beast_http::async_write(stream, req, asio::as_tuple(asio::use_awaitable));
  x.bytes_written = written;
  if (write_ec) {
    x.error = write_ec;
    co_return;
  }

  x.reached = stage::reading;
  x.phases.enter(phase::first_byte, phase_timings::clock::now());
  // Interim responses (100 Continue, 103 Early Hints) come before the final
  // one (RFC 9110 §15.2): each is read with a fresh parser and skipped, up to
  // a bound: a server sending them forever would hold the attempt to its end.
  for (unsigned interim = 0;; ++interim) {
    if (interim > options.max_interim_responses) {
      x.error = response_error::too_many_interim_responses;
      co_return;
    }
    beast_http::response_parser<streamed_body> parser;
    parser.header_limit(options.header_limit);
    parser.body_limit(options.body_limit);
    // A body that may go to the sink is bounded by the sink, not by the
    // parser; one kept in memory still by body_limit (in the body itself).
    parser.get().body().limit = options.body_limit;
    if (streaming.enabled()) {
      parser.body_limit(boost::none);
      parser.get().body().streaming = &streaming;
    }
    if (req.method() == beast_http::verb::head) parser.skip(true);
    if (cancellation_requested(cancel_state)) {
      x.error = asio::error::operation_aborted;
      co_return;
    }
    if (const error_code ec = co_await read_response(options, stream, conn, parser, cancel_state, answered, x.phases)) {
      x.error = ec;
      co_return;
    }
    const unsigned status = parser.get().result_int();
    if (is_interim(status)) continue;
    // The parser knows what the message alone does not: a body that ended
    // with the connection. A request that asked to close, and a connection
    // switched to another protocol, are not reused either.
    keep_alive = parser.keep_alive() && req.keep_alive() && status != 101;
    x.res.emplace(to_response(parser.release()));
    break;
  }
  x.phases.finish(phase_timings::clock::now());
  x.received_at = std::chrono::system_clock::now();
  x.reached = stage::complete;
  // Bytes beyond the response (a server that sent more than it announced)
  // would be read as the next request's answer: such a connection is closed.
  keep_alive = keep_alive && conn.buffer.size() == 0;
}

} // namespace

// Not a coroutine itself: it hands back the exchange's own (lazy) coroutine,
// one frame fewer per request.
asio::awaitable<void> write_and_read(const client_options& options, connection& conn, const request& req,
                                     const body_streaming& streaming, exchange& x, bool& keep_alive, bool& answered) {
  if (auto* tls = std::get_if<connection::tls_stream>(&conn.stream))
    return exchange_on(options, *tls, conn, req, streaming, x, keep_alive, answered);
  return exchange_on(options, std::get<tcp::socket>(conn.stream), conn, req, streaming, x, keep_alive, answered);
}

} // namespace coretry::http::detail
