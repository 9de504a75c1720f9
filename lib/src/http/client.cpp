// The client: its options checked, its requests prepared, their attempts
// classified. The rest of the transport is beside it, one concept to a file
// (README.md beside this file names every one; what it shares with Redis is
// coretry::net's, src/net/README.md). The main ones:
//   client_state.hpp        what a client shares with its requests and attempts
//   url.cpp                 reading a URL strictly (coretry/http/url.hpp)
//   prepare.hpp/.cpp        from URL, request and options to what each attempt sends
//   pool.hpp                connections per origin, idle expiry (leases: lease.hpp,
//                           waiting attempts: origin_waiters.hpp)
//   address_health.hpp/.cpp what counts for or against an address, which one a
//                           request goes to; the address book (address_book.hpp)
//                           is its store, each name's balancer (balancer.hpp) in it
//   connect.hpp/.cpp        the connection, TLS context, lookup, TCP connect, handshake
//   tunnel.hpp/.cpp         CONNECT through a proxy, its answer read within bounds
//   proxy.cpp               proxy URLs, NO_PROXY lists, the environment's proxies
//   attempt_op.hpp/.cpp     one attempt, a composed operation: lease, connect if
//                           needed, then what the exchange's rules ask
//   exchange_machine.hpp/.cpp the exchange's rules without I/O: the head, the
//                           bounded parsing, interim responses, keep-alive, a
//                           stale reused connection, validation
//   response_reading.hpp    the sans-I/O steps of the response's read
// Deadlines inside an attempt (connect, idle) use coretry::async_with_deadline.

#include <coretry/http/client.hpp>

#include <coretry/detail/block_cache.hpp>
#include <coretry/http/proxy.hpp>
#include <coretry/http/syntax.hpp>
#include <coretry/http/tls.hpp>

#include "attempt_op.hpp"
#include "client_state.hpp"
#include "prepare.hpp"

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
  if (!is_field_value(o.user_agent))
    refuse("user_agent has CR, LF, NUL or another control character");
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

/// client_options::resolve as pins in `health`; a later entry for the same
/// name and port replaces an earlier one, as curl's do.
void pin_names(const client_options& o, address_health& health) {
  for (const auto& text : o.resolve) {
    const resolve_entry entry = parse_resolve_entry(text);
    std::vector<asio::ip::tcp::endpoint> endpoints;
    for (const auto& address : entry.addresses) endpoints.emplace_back(address, entry.port);
    const std::string port = std::to_string(entry.port);
    health.pin({entry.host, port}, std::move(endpoints));
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

} // namespace detail

client::client(asio::any_io_executor ex, client_options options)
    : state_(std::make_shared<detail::client_state>(std::move(ex), std::move(options))) {}

client::~client() = default;

asio::any_io_executor client::get_executor() const { return state_->executor; }
pool_stats client::stats() const { return state_->pool.stats(); }
address_stats client::addresses() const { return state_->health.stats(phase_timings::clock::now()); }
void client::close_idle() { state_->pool.close_idle(); }

client::prepared client::prepare(std::string_view url, request&& req, const request_options& options) const {
  return prepare_parts(*state_, state_->parts_of(url), std::move(req), options);
}

client::prepared client::prepare_parts(detail::client_state& state, url_parts&& parts, request&& req,
                                       const request_options& options) {
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
  // From the thread's block cache: a request's prepared form is one block of
  // one size, freed when its operation ends.
  auto proxy = state.proxy_for(parts.host);
  auto names = state.names_for(parts);
  auto request = std::allocate_shared<detail::prepared_request>(
      coretry::detail::block_allocator<detail::prepared_request>(),
      detail::prepare_request(std::move(parts), std::move(req), options, std::move(proxy), std::move(names)));
  prepared p;
  static_cast<retry_controls&>(p.retry) = options;
  p.retry.safety = request->safety;
  p.retry.operation = options.route;
  p.request = std::move(request);
  return p;
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
  // How the address did is address_health's to judge (attempt_blame).
  if (x.address)
    state.health.attempt_ended(detail::connection_target(request.where), *x.address, request.where.proxy != nullptr, ec,
                               x, v.status, [] { return phase_timings::clock::now(); });
  return v;
}

} // namespace coretry::http
