#ifndef CORETRY_SRC_HTTP_ATTEMPT_OP_HPP
#define CORETRY_SRC_HTTP_ATTEMPT_OP_HPP

// One attempt of a request as a composed operation (client::start_attempt,
// defined in attempt_op.cpp): what it keeps from its start to its end, and
// the exchange's rules it drives (exchange_machine.hpp, which also says
// which errors are a connection the server had closed: closed_by_peer).
// Internal to coretry::http.

#include "client_state.hpp"
#include "exchange_machine.hpp"
#include "prepare.hpp"

#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <array>
#include <exception>
#include <memory>
#include <optional>
#include <span>

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

} // namespace coretry::http::detail

#endif
