#ifndef CORETRY_SRC_HTTP_ATTEMPT_OP_HPP
#define CORETRY_SRC_HTTP_ATTEMPT_OP_HPP

// One attempt of a request as a composed operation (client::start_attempt,
// defined in attempt_op.cpp): the rules of the exchange it drives
// (exchange_machine.hpp, which also says which errors are a connection the
// server had closed: closed_by_peer), and the reads and writes it starts on
// a connection. Internal to coretry::http.

#include "connect.hpp"
#include "exchange_machine.hpp"
#include "prepare.hpp"

#include <coretry/with_deadline.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <utility>
#include <variant>

namespace coretry::http::detail {

/// The exchange's bounds and rules, from the client's options and the request.
inline exchange_rules exchange_rules_of(const client_options& options, const prepared_request& prepared) {
  return {options.header_limit,
          options.body_limit,
          options.max_interim_responses,
          &prepared.streaming,
          prepared.repeatable(),
          &prepared.validate,
          {prepared.target, prepared.names->host, options.user_agent}};
}

/// Writes all of `buffers` on `conn`; then handler(error_code, std::size_t).
template <class Buffers, class Handler>
void async_write_all(connection& conn, const Buffers& buffers, Handler&& handler) {
  std::visit([&](auto& stream) { boost::asio::async_write(stream, buffers, std::forward<Handler>(handler)); },
             conn.stream);
}

/// Reads some bytes from `conn` into `space`. With no `idle` limit (zero),
/// then handler(error_code, std::size_t); with one, the read must bring
/// something within it, then handler(deadline_outcome<std::size_t>) on `ex`.
/// The read itself is the operation: its handler carries the deadline's
/// slot to the socket.
template <class Handler>
void async_read_within(connection& conn, boost::asio::mutable_buffer space, duration idle,
                       boost::asio::any_io_executor ex, Handler&& handler) {
  std::visit(
      [&](auto& stream) {
        auto read_some = [&stream, space](auto inner) { stream.async_read_some(space, std::move(inner)); };
        if (idle == duration::zero()) read_some(std::forward<Handler>(handler));
        else
          async_with_deadline<std::size_t>(ex, instant_after(boost::asio::steady_timer::clock_type::now(), idle),
                                           read_some, std::forward<Handler>(handler));
      },
      conn.stream);
}

} // namespace coretry::http::detail

#endif
