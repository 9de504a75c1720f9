// The client and one attempt of a request: lease a connection, connect if
// needed, exchange, give the connection back. The rest of the transport is
// beside it, one concept to a file:
//   url.cpp                 reading a URL strictly (coretry/http/url.hpp)
//   prepare.hpp/.cpp        from URL, request and options to what each attempt sends
//   pool.hpp                connections per origin, leases, waiters, idle expiry
//   connect.hpp/.cpp        the connection, TLS context, lookup, TCP connect, handshake
//   tunnel.hpp/.cpp         CONNECT through a proxy, its answer read within bounds
//   proxy.cpp               proxy URLs, NO_PROXY lists, the environment's proxies
//   exchange_io.hpp/.cpp    writing the request and the bounded read of the response
//   response_reading.hpp    the sans-I/O steps of that read
// Deadlines inside an attempt (connect, idle) use coretry::async_with_deadline.

#include <coretry/http/client.hpp>

#include <coretry/http/proxy.hpp>
#include <coretry/http/tls.hpp>
#include <coretry/with_deadline.hpp>

#include "connect.hpp"
#include "exchange_io.hpp"
#include "pool.hpp"
#include "prepare.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

namespace coretry::http {

namespace asio = boost::asio;
using boost::system::error_code;

namespace detail {

constexpr std::size_t max_resolve_entries = 1024;

client_options checked(client_options o) {
  const auto refuse = [](const char* problem) { throw std::invalid_argument(std::string("coretry::http: ") + problem); };
  if (o.connect_timeout < duration::zero()) refuse("connect_timeout must not be negative (zero: none of its own)");
  if (o.idle_timeout < duration::zero()) refuse("idle_timeout must not be negative (zero: none)");
  if (o.pool_idle_timeout < duration::zero()) refuse("pool_idle_timeout must not be negative");
  if (o.max_connections_per_origin == 0) refuse("max_connections_per_origin must be at least 1");
  if (o.header_limit == 0) refuse("header_limit must be at least 1 byte");
  if (o.line_limit == 0) refuse("line_limit must be at least 1 byte");
  if (o.certificate_file.empty() && !o.private_key_file.empty())
    refuse("private_key_file is given without certificate_file");
  if (o.connection_attempt_delay < std::chrono::milliseconds(10))
    refuse("connection_attempt_delay must be at least 10 ms (RFC 8305)");
  if (o.lookup_ttl < duration::zero()) refuse("lookup_ttl must not be negative (zero: a lookup per new connection)");
  if (o.ejection.base_ejection_time <= duration::zero() || o.ejection.max_ejection_time < o.ejection.base_ejection_time)
    refuse("ejection.base_ejection_time must be positive and ejection.max_ejection_time at least as long "
           "(ejection.consecutive_failures = 0 turns ejection off)");
  if (o.ejection.max_ejection_percent > 100) refuse("ejection.max_ejection_percent must be at most 100");
  if (o.resolve.size() > max_resolve_entries) refuse("more than 1024 resolve entries");
  for (const auto& entry : o.resolve) {
    try {
      (void)parse_resolve_entry(entry);
    } catch (const std::invalid_argument& e) {
      refuse(e.what()); // names the entry and its problem
    }
  }
  return o;
}

/// client_options::resolve as pins in `book`; a later entry for the same
/// name and port replaces an earlier one, as curl's do.
void pin_names(const client_options& o, address_book& book) {
  for (const auto& text : o.resolve) {
    const resolve_entry entry = parse_resolve_entry(text);
    std::vector<asio::ip::tcp::endpoint> endpoints;
    for (const auto& address : entry.addresses) endpoints.emplace_back(address, entry.port);
    const std::string port = std::to_string(entry.port);
    book.pin({entry.host, port}, std::move(endpoints));
  }
}

/// client_options::proxy read, or null without one.
std::shared_ptr<const proxy_route> route_of(const std::string& proxy) {
  if (proxy.empty()) return nullptr;
  proxy_parts parts = parse_proxy_url(proxy); // throws std::invalid_argument naming the problem
  return std::make_shared<const proxy_route>(
      proxy_route{std::move(parts.host), std::to_string(parts.port), std::move(parts.authorization),
                  std::move(parts.shown)});
}

struct client_state {
  client_state(asio::any_io_executor ex, client_options o)
      : executor(std::move(ex)), options(checked(std::move(o))),
        pool(executor, options.max_connections_per_origin, options.pool_idle_timeout),
        book(options.lookup_ttl, options.ejection), tls(options), proxy(route_of(options.proxy)) {
    pin_names(options, book);
    if (!options.ca_file.empty() || !options.certificate_file.empty()) {
      // A client given a CA file or a client certificate speaks HTTPS: its
      // TLS context is made now, so that a bad file is a clear error at
      // construction (not a handshake failure on every attempt later) and
      // loading the trust stores is not charged to the first request's
      // deadline.
      try {
        tls.get();
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("coretry::http: " + std::string(e.what()));
      } catch (const boost::system::system_error& e) {
        // The file changed between the check and the load, or the system's
        // trust stores failed: still bad input, not an internal error.
        throw std::invalid_argument("coretry::http: the TLS context could not be made: " + std::string(e.what()));
      }
    }
  }

  /// `url` read strictly (parse_url), or the parts of the last URL read
  /// when it is the same text: a client sends to the same URL again and
  /// again, and reading one costs more than comparing it.
  url_parts parts_of(std::string_view url) {
    {
      std::lock_guard lock(last_url_mutex);
      if (remembered && url == last_url) return last_parts;
    }
    url_parts parts = parse_url(url); // throws on a bad URL, which is not kept
    if (url.size() <= max_remembered_url) {
      std::lock_guard lock(last_url_mutex);
      last_url.assign(url); // reuses the text's capacity
      last_parts = parts;
      remembered = true;
    }
    return parts;
  }

  asio::any_io_executor executor;
  client_options options;
  connection_pool pool;
  address_book book;
  tls_context tls;
  /// The proxy, null without one.
  std::shared_ptr<const proxy_route> proxy;

  /// The proxy requests to `host` go through, null for none.
  std::shared_ptr<const proxy_route> proxy_for(const std::string& host) const {
    if (!proxy || bypasses_proxy(options.no_proxy, host)) return nullptr;
    return proxy;
  }

private:
  static constexpr std::size_t max_remembered_url = 2048;
  std::mutex last_url_mutex;
  std::string last_url;
  url_parts last_parts;
  bool remembered = false;
};

} // namespace detail

client::client(asio::any_io_executor ex, client_options options)
    : state_(std::make_shared<detail::client_state>(std::move(ex), std::move(options))) {}

client::~client() = default;

asio::any_io_executor client::get_executor() const { return state_->executor; }
pool_stats client::stats() const { return state_->pool.stats(); }
address_stats client::addresses() const { return state_->book.stats(phase_timings::clock::now()); }
void client::close_idle() { state_->pool.close_idle(); }

client::prepared client::prepare(std::string_view url, request&& req, const request_options& options) const {
  const url_parts parts = state_->parts_of(url);
  if (auto problem = options.policy.validate()) throw std::invalid_argument("coretry::policy: " + *problem);
  if (options.policy.hedging.max_hedges > 0) {
    // Hedges run at the same time as the attempt before them.
    if (options.body)
      throw std::invalid_argument("coretry::http: hedging needs a request body held in memory: a body reopened for "
                                  "each attempt may not be reproducible while another attempt reads it");
    if (options.stream_body || options.body_sink)
      throw std::invalid_argument("coretry::http: hedging cannot stream response bodies: attempts running at once "
                                  "would write to one output");
  }
  auto request = std::make_shared<detail::prepared_request>(
      detail::prepare_request(parts, std::move(req), options, state_->options.user_agent,
                              state_->proxy_for(parts.host)));
  prepared p;
  p.retry.safety = request->safety;
  p.retry.budget = options.budget;
  p.retry.gate = options.gate;
  p.retry.tracker = options.tracker;
  p.retry.observer = options.observer;
  p.retry.random = options.random;
  p.retry.operation = options.route;
  p.request = std::move(request);
  return p;
}

namespace detail {

/// Ends the attempt's last phase, tells the request's phase observer, and
/// hands the exchange back to be returned.
exchange&& ended(exchange& x, const prepared_request& prepared, unsigned attempt) {
  if (x.phases.running()) x.phases.finish(phase_timings::clock::now());
  if (prepared.phases)
    prepared.phases->attempt_phases({prepared.route, attempt, x.phases, x.reused_connection, x.res.has_value()});
  return std::move(x);
}

/// One attempt: lease, connect if needed, write, read the complete response.
/// Every failure is recorded in the exchange, with how far the attempt got,
/// so that the classifier can tell "never sent" from "outcome unknown". One
/// coroutine frame for the whole attempt (the exchange's own below it).
asio::awaitable<exchange> attempt_exchange(std::shared_ptr<client_state> state_owner,
                                           std::shared_ptr<const prepared_request> prepared_owner,
                                           attempt_context<std::chrono::steady_clock> context) {
  // A cancelled attempt must still report how far it got: no co_await may
  // throw on cancellation; each operation's error says it instead.
  co_await asio::this_coro::throw_if_cancelled(false);
  client_state* const state = state_owner.get();
  const prepared_request* const prepared = prepared_owner.get();
  exchange x;
  if (prepared->where.proxy) x.proxy = prepared->where.proxy->shown;
  if (const auto key = prepared->req.find("Idempotency-Key"); key != prepared->req.end())
    x.idempotency_key = std::string(key->value());
  try {
    const request* req = &prepared->req;
    std::optional<request> per_attempt;
    if (prepared->body) {
      // A streamed body is reopened for every attempt, never resent consumed.
      std::optional<std::string> body = prepared->body(context.number);
      if (!body) {
        x.problem = "the request body cannot be reproduced for attempt " + std::to_string(context.number);
        co_return ended(x, *prepared, context.number);
      }
      per_attempt.emplace(prepared->req);
      per_attempt->body() = std::move(*body);
      per_attempt->prepare_payload();
      req = &*per_attempt;
    }
    if (prepared->decorate) {
      if (!per_attempt) per_attempt.emplace(prepared->req);
      prepared->decorate(*per_attempt, context);
      req = &*per_attempt;
    }
    if (per_attempt) {
      if (auto problem = request_problem(*per_attempt)) {
        x.problem = "after the request decorator: " + *problem;
        co_return ended(x, *prepared, context.number);
      }
    }

    const std::string& key = prepared->where.key;
    const name_and_port target = connection_target(prepared->where);
    // The addresses this operation's earlier attempts (and hedges) used: a
    // connection to another is preferred when there is one.
    std::array<asio::ip::tcp::endpoint, used_addresses::capacity> used_list;
    const std::span<const asio::ip::tcp::endpoint> avoid(used_list.data(), prepared->used.copy(used_list));
    phase_timings::clock::time_point lease_at; // the time leases are judged at
    const auto suits = [&](const connection& c) { return state->book.suits(target, c.peer, avoid, lease_at); };
    const auto cancel_state = co_await asio::this_coro::cancellation_state;
    for (;;) {
      // One clock read per change of phase: this one starts the wait for a
      // connection; each later phase's start ends the one before.
      lease_at = phase_timings::clock::now();
      x.phases.enter(phase::pool_wait, lease_at);
      std::optional<lease> held = state->pool.try_lease(key, suits);
      while (!held) {
        if (cancellation_requested(cancel_state)) {
          x.error = asio::error::operation_aborted;
          co_return ended(x, *prepared, context.number);
        }
        auto [ec] = co_await state->pool.async_wait_for_release(key, asio::as_tuple(asio::use_awaitable));
        if (ec) {
          x.error = ec;
          co_return ended(x, *prepared, context.number);
        }
        lease_at = phase_timings::clock::now();
        if (auto again = state->pool.try_lease(key, suits)) held.emplace(std::move(*again));
      }

      if (held->get()) {
        x.reused_connection = true;
        x.address = held->get()->peer;
      } else {
        error_code ec;
        // The read buffer's bound is what limits a chunk-size line, its
        // extensions and the trailers: Beast 1.81's parser waits for a whole
        // line however long it is.
        const connect_context setup{state->tls,
                                    state->pool,
                                    state->book,
                                    std::size_t{state->options.header_limit} + state->options.line_limit,
                                    state->options.header_limit,
                                    state->options.connection_attempt_delay};
        auto connecting = establish(prepared->where, setup, avoid, *held, x);
        if (state->options.connect_timeout == duration::zero()) {
          ec = co_await std::move(connecting);
        } else {
          auto done = co_await async_with_deadline<error_code>(
              co_await asio::this_coro::executor,
              instant_after(asio::steady_timer::clock_type::now(), state->options.connect_timeout),
              std::move(connecting), asio::use_awaitable);
          if (done.exception) std::rethrow_exception(done.exception);
          ec = done.error == attempt_error::timed_out ? error_code(asio::error::timed_out)
                                                      : done.error ? done.error : *done.value;
        }
        if (ec) {
          x.error = ec;
          co_return ended(x, *prepared, context.number); // the lease closes whatever was opened
        }
      }
      prepared->used.add(*x.address);

      connection& conn = *held->get();
      bool keep_alive = false;
      bool answered = false;
      co_await write_and_read(state->options, conn, *req, prepared->streaming, x, keep_alive, answered);

      // A repeatable request that found its reused connection closed by the
      // server after the check before reuse, before a byte of answer, goes
      // again on a fresh one within the same attempt. The closed connection is
      // dropped with its lease.
      if (x.reused_connection && !answered && closed_by_peer(x.error) && prepared->repeatable() &&
          !cancellation_requested(cancel_state)) {
        state->pool.note_stale();
        exchange fresh;
        fresh.idempotency_key = std::move(x.idempotency_key);
        fresh.proxy = std::move(x.proxy);
        fresh.phases = x.phases; // the attempt's clock goes on
        x = std::move(fresh);
        continue;
      }

      // Only a connection whose exchange ended cleanly goes back to the pool.
      if (!x.error && keep_alive) held->mark_reusable();
      break;
    }
    if (x.res && x.res->result_int() >= 200 && x.res->result_int() < 300 && prepared->validate)
      if (auto problem = prepared->validate(*x.res)) x.problem = std::move(*problem);
  } catch (const boost::system::system_error& e) {
    x.error = e.code();
  }
  co_return ended(x, *prepared, context.number);
}

} // namespace detail

asio::awaitable<exchange> client::send_once(std::shared_ptr<detail::client_state> state,
                                            std::shared_ptr<const detail::prepared_request> prepared,
                                            attempt_context<std::chrono::steady_clock> context) {
  return detail::attempt_exchange(std::move(state), std::move(prepared), context);
}

namespace {

verdict classify_attempt(const detail::prepared_request& request, const error_code& ec, const exchange& x) {
  for (const auto& extension : request.classifiers)
    if (auto v = extension(ec, x)) return *v;
  // The client's own refusals of a response: the server would send the same.
  if (!ec && x.error.category() == response_error_category()) {
    switch (static_cast<response_error>(x.error.value())) {
    case response_error::line_too_long: return verdict::permanent("response_line_too_long", delivery::unknown);
    case response_error::too_many_interim_responses:
      return verdict::permanent("too_many_interim_responses", delivery::unknown);
    }
  }
  return classify_exchange(ec, x);
}

} // namespace

verdict client::classify(detail::client_state& state, const detail::prepared_request& request, const error_code& ec,
                         const exchange& x) {
  verdict v = classify_attempt(request, ec, x);
  if (x.address && !request.where.proxy) {
    // How the address did: an answer below 500 ends its run of failures; a
    // 5xx the classifier takes as transient, an attempt that ran out of
    // time on a connection to it, or a new connection that the other end
    // closed or reset under it (or the idle limit ended) is one more. A
    // reused connection closed under it is the usual end of a kept-alive
    // connection; an answer the client refused (too large, malformed), a
    // 501 or 505, are not the address's doing; an attempt cancelled for
    // other reasons (a hedge that lost) says nothing. Through a proxy the
    // address is the proxy's and the answer the origin's: nothing is told
    // (the proxy's connection failures are, when connecting).
    const detail::name_and_port target = detail::connection_target(request.where);
    const bool timed_out = ec == attempt_error::timed_out;
    const bool server_error = x.res && x.res->result_int() >= 500 && v.status == attempt_status::transient;
    const bool broke = !ec && !x.res && !x.reused_connection &&
                       (detail::closed_by_peer(x.error) || x.error == asio::error::timed_out);
    if (timed_out || server_error || broke) state.book.failed(target, *x.address, phase_timings::clock::now());
    else if (x.res && x.res->result_int() < 500) state.book.succeeded(target, *x.address);
  }
  return v;
}

} // namespace coretry::http
