#ifndef CORETRY_SRC_HTTP_ATTEMPT_OP_HPP
#define CORETRY_SRC_HTTP_ATTEMPT_OP_HPP

// One attempt of a request as a composed operation (client::start_attempt,
// defined in attempt_op.cpp): the rules of the exchange it drives
// (exchange_machine.hpp, which also says which errors are a connection the
// server had closed: closed_by_peer), and the reads and writes it starts on
// a connection; the attempt's state block. Internal to coretry::http.

#include "client_state.hpp"
#include "connect.hpp"
#include "exchange_machine.hpp"
#include "prepare.hpp"

#include <coretry/attempt.hpp>
#include <coretry/with_deadline.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <memory>
#include <optional>
#include <span>
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

/// What one attempt keeps from its start to its end: one block.
struct attempt_state {
  attempt_state(std::shared_ptr<client_state> s, std::shared_ptr<const prepared_request> p,
                attempt_context<std::chrono::steady_clock> c, boost::asio::cancellation_slot parent)
      : state(std::move(s)), prepared(std::move(p)), context(c), parent(parent), cancel(parent),
        machine(exchange_rules_of(state->options, *prepared), x) {}

  std::shared_ptr<client_state> state;
  std::shared_ptr<const prepared_request> prepared;
  attempt_context<std::chrono::steady_clock> context;
  /// The handler's slot, which `cancel` is installed in.
  boost::asio::cancellation_slot parent;
  /// Between the handler's slot and the inner operations: remembers a
  /// cancellation that came while none was running.
  boost::asio::cancellation_state cancel;
  exchange x;
  /// The attempt's own copy of the request, when its body is reopened or a
  /// decorator changes it; `req` is what is sent.
  std::optional<request> per_attempt;
  const request* req = nullptr;
  name_and_port target;
  /// The addresses this operation's earlier attempts (and hedges) used: a
  /// connection to another is preferred when there is one.
  std::array<boost::asio::ip::tcp::endpoint, used_addresses::capacity> used_list;
  std::span<const boost::asio::ip::tcp::endpoint> avoid;
  /// The balancer's choice for this lease (none: the name is not spread).
  std::optional<boost::asio::ip::tcp::endpoint> pick;
  /// The request counted in flight to its address, until its end (declared
  /// after what its name's text lives in: ended first).
  in_flight_request in_flight;
  /// The request was sent before in this attempt (on a pooled connection
  /// the server had closed): its re-send is not another request.
  bool resent = false;
  phase_timings::clock::time_point lease_at; ///< the time leases are judged at
  std::optional<lease> held;
  std::optional<connect_context> setup;
  /// The rules of the exchange on the connection (exchange_machine.hpp).
  exchange_machine machine;
  /// What an attempt that ended inside its initiating call threw, until the
  /// post that reports it runs.
  std::exception_ptr failure;

  bool cancelled() const { return cancellation_requested(cancel); }
  connection& conn() const { return *held->get(); }
  const client_options& options() const { return state->options; }
};

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
