#include "connect.hpp"
#include "race_connect.hpp"

#include <coretry/http/tls.hpp>
#include <coretry/with_deadline.hpp>
#include <coretry/net/authority.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <openssl/ssl.h>

#include <cerrno>
#include <memory>

#include <sys/socket.h>
#include <unistd.h>

namespace coretry::http {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace detail {

tcp::socket& connection::socket() {
  if (auto* plain = std::get_if<tcp::socket>(&stream)) return *plain;
  return std::get<tls_stream>(stream).next_layer();
}

bool connection::is_stale() {
  if (auto* tls = std::get_if<tls_stream>(&stream)) {
    // Records the TLS layer already took off the socket, decrypted or not.
    SSL* native = tls->native_handle();
    if (SSL_pending(native) > 0 || BIO_ctrl_pending(SSL_get_rbio(native)) > 0) return true;
  }
  char byte;
  const ssize_t n = ::recv(socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0) return !(errno == EAGAIN || errno == EWOULDBLOCK);
  return true; // 0: orderly close; > 0: unsolicited data
}

void connection::close() {
  error_code ignored;
  socket().shutdown(tcp::socket::shutdown_both, ignored);
  socket().close(ignored);
}

ssl::context& tls_context::get() {
  std::call_once(made_, [this] { context_.emplace(make_client_context(files_, verify_peer_)); });
  return *context_;
}

namespace {

/// Resolves, and on cancellation completes at once with operation_aborted.
/// Asio 1.81's resolver has no per-operation cancellation, and cancelling it
/// cannot stop a getaddrinfo already running on its background thread (a DNS
/// server that does not answer holds it for its whole timeout): the lookup is
/// abandoned instead, and its late result dropped.
template <class Token>
auto async_resolve_abandonable(const asio::any_io_executor& ex, const std::string& host, const std::string& port,
                               Token&& token) {
  return asio::async_initiate<Token, void(error_code, tcp::resolver::results_type)>(
      [&ex, &host, &port](auto handler) {
        using handler_type = decltype(handler);
        // Shared by the lookup and the cancellation, which both run on the
        // handler's executor: whichever comes first takes the handler.
        struct lookup {
          explicit lookup(const asio::any_io_executor& e) : resolver(e) {}
          tcp::resolver resolver;
          std::optional<handler_type> waiting;
        };
        auto shared = std::make_shared<lookup>(ex);
        auto slot = asio::get_associated_cancellation_slot(handler);
        auto handler_ex = asio::get_associated_executor(handler, ex);
        shared->waiting.emplace(std::move(handler));
        if (slot.is_connected())
          slot.assign([shared, handler_ex](asio::cancellation_type) {
            if (!shared->waiting) return;
            shared->resolver.cancel(); // a lookup still queued does not start
            handler_type taken = std::move(*shared->waiting);
            shared->waiting.reset();
            asio::post(handler_ex, asio::append(std::move(taken), error_code(asio::error::operation_aborted),
                                                tcp::resolver::results_type{}));
          });
        shared->resolver.async_resolve(
            host, port,
            asio::bind_executor(handler_ex, [shared, slot](error_code ec, tcp::resolver::results_type r) mutable {
              if (!shared->waiting) return; // abandoned
              if (slot.is_connected()) slot.clear();
              handler_type taken = std::move(*shared->waiting);
              shared->waiting.reset();
              std::move(taken)(ec, std::move(r));
            }));
      },
      token);
}

/// The endpoint of a host that is an IP address, if it is one.
std::optional<tcp::endpoint> literal_endpoint(const std::string& host, const std::string& port_text) {
  error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return std::nullopt;
  const auto port = net::parse_port(port_text, net::port_zero::allowed);
  if (!port) return std::nullopt; // the resolver will say why
  return tcp::endpoint(address, *port);
}

} // namespace

asio::awaitable<error_code> establish(const origin& where, const connect_context& c,
                                      std::span<const tcp::endpoint> avoid, const std::optional<tcp::endpoint>& first,
                                      lease& held, exchange& x) {
  auto ex = co_await asio::this_coro::executor;
  const auto cancel_state = co_await asio::this_coro::cancellation_state;
  std::optional<tcp::socket> connected;
  tcp::endpoint peer;
  // Through a proxy, the connection is the proxy's: its name is looked up.
  const std::string& host = where.proxy ? where.proxy->host : where.host;
  const std::string& port = where.proxy ? where.proxy->port : where.port;
  const name_and_port target{host, port};
  std::vector<tcp::endpoint> order;
  if (const auto address = literal_endpoint(host, port)) {
    // An address needs no lookup. Asio 1.81 runs lookups one at a time on a
    // background thread, where cancellation cannot reach a getaddrinfo
    // already running: a slow DNS server would hold this attempt up too.
    order.push_back(*address);
  } else {
    if (c.health.needs_lookup(target, phase_timings::clock::now())) {
      x.reached = stage::resolving;
      x.phases.enter(phase::lookup, phase_timings::clock::now());
      if (cancellation_requested(cancel_state)) co_return asio::error::operation_aborted;
      c.pool.note_lookup();
      auto [resolve_ec, results] = co_await async_resolve_abandonable(ex, host, port, asio::as_tuple(asio::use_awaitable));
      if (resolve_ec) co_return resolve_ec;
      std::vector<tcp::endpoint> found;
      for (const auto& entry : results) {
        if (found.size() == max_addresses_per_name) break;
        found.push_back(entry.endpoint());
      }
      c.health.store(target, std::move(found), phase_timings::clock::now());
    }
    order = c.health.order(target, avoid, phase_timings::clock::now(), first);
    if (order.empty()) co_return asio::error::host_not_found;
  }

  x.reached = stage::connecting;
  x.phases.enter(phase::connect, phase_timings::clock::now());
  if (cancellation_requested(cancel_state)) co_return asio::error::operation_aborted;
  if (order.size() == 1) {
    tcp::socket socket(ex);
    auto [connect_ec] = co_await socket.async_connect(order.front(), asio::as_tuple(asio::use_awaitable));
    if (connect_ec) {
      c.health.connect_ended(target, {.at = order.front(), .error = connect_ec}, phase_timings::clock::now());
      co_return connect_ec;
    }
    connected.emplace(std::move(socket));
    peer = order.front();
  } else {
    c.health.race_started();
    race_result raced = co_await race_connect(order, c.attempt_delay, [&](const connect_report& loser) {
      c.health.connect_ended(target, loser, phase_timings::clock::now());
    });
    if (raced.error) co_return raced.error;
    connected.emplace(std::move(*raced.socket));
    peer = raced.winner;
  }
  tcp::socket& socket = *connected;
  x.address = peer;
  socket.set_option(tcp::no_delay(true));
  c.pool.note_opened();
  if (!where.tls) {
    held.attach(std::make_unique<connection>(std::move(socket)));
    held.get()->buffer.max_size(c.buffer_limit);
    held.get()->peer = peer;
    co_return error_code{};
  }
  if (where.proxy) {
    // Still connecting to the origin: nothing of the request has left.
    if (const error_code ec = co_await open_tunnel(socket, *where.proxy, where.host, where.port, c.header_limit, x))
      co_return ec;
  }

  x.reached = stage::handshaking;
  x.phases.enter(phase::tls, phase_timings::clock::now());
  held.attach(std::make_unique<connection>(std::move(socket), c.tls.get()));
  held.get()->buffer.max_size(c.buffer_limit);
  held.get()->peer = peer;
  auto& stream = std::get<connection::tls_stream>(held.get()->stream);
  if (const error_code named = expect_peer(stream, where.host)) co_return named;
  if (cancellation_requested(cancel_state)) co_return asio::error::operation_aborted;
  auto [handshake_ec] = co_await stream.async_handshake(ssl::stream_base::client, asio::as_tuple(asio::use_awaitable));
  co_return handshake_ec;
}

asio::awaitable<error_code> establish_within(const origin& where, const connect_context& c,
                                             std::span<const tcp::endpoint> avoid,
                                             const std::optional<tcp::endpoint>& first, lease& held, exchange& x,
                                             duration timeout) {
  co_await asio::this_coro::throw_if_cancelled(false);
  auto connecting = establish(where, c, avoid, first, held, x);
  if (timeout == duration::zero()) co_return co_await std::move(connecting);
  auto done = co_await async_with_deadline<error_code>(co_await asio::this_coro::executor,
                                                       instant_after(asio::steady_timer::clock_type::now(), timeout),
                                                       std::move(connecting), asio::use_awaitable);
  if (done.exception) std::rethrow_exception(done.exception);
  co_return done.error == attempt_error::timed_out ? error_code(asio::error::timed_out)
                                                   : done.error ? done.error : *done.value;
}

} // namespace detail
} // namespace coretry::http
