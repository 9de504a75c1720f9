#include "connect.hpp"

#include <coretry/http/tls.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>

#include <sys/socket.h>
#include <unistd.h>

namespace coretry::http {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;

std::optional<std::string> ca_file_problem(const std::string& path) {
  if (::access(path.c_str(), R_OK) != 0)
    return "cannot read the CA file '" + path + "': " + std::strerror(errno);
  ssl::context context(ssl::context::tls_client);
  error_code ec;
  context.load_verify_file(path, ec);
  if (ec)
    return "the CA file '" + path + "' holds no usable PEM certificate: no PEM certificate could be loaded from it (" +
           ec.message() + ")";
  return std::nullopt;
}

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

namespace {

/// OpenSSL 3.0 works out a certificate's extensions (key identifiers, CA
/// flag, purposes) the first time a verification needs them and stores them
/// in the certificate. A trusted certificate is shared by every handshake on
/// the context, so the first handshakes on several threads at once would
/// race to store them (ThreadSanitizer sees one thread writing a key
/// identifier while another compares it). Working them out here, once,
/// before the context is shared, leaves handshakes only reading them.
/// Certificates OpenSSL loads later from a hashed directory are not covered.
void settle_trusted_certificates(ssl::context& context) {
  X509_STORE* store = SSL_CTX_get_cert_store(context.native_handle());
  if (store == nullptr) return;
  STACK_OF(X509_OBJECT)* objects = X509_STORE_get0_objects(store);
  for (int i = 0; i < sk_X509_OBJECT_num(objects); ++i)
    if (X509* certificate = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objects, i)))
      X509_check_purpose(certificate, -1, 0);
}

} // namespace

ssl::context& tls_context::get() {
  std::call_once(made_, [this] {
    ssl::context context(ssl::context::tls_client);
    SSL_CTX_set_min_proto_version(context.native_handle(), TLS1_2_VERSION);
    context.set_default_verify_paths();
    if (!ca_file_.empty()) context.load_verify_file(ca_file_);
    context.set_verify_mode(verify_peer_ ? ssl::verify_peer : ssl::verify_none);
    settle_trusted_certificates(context);
    context_.emplace(std::move(context));
  });
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

bool is_ip_literal(const std::string& host) {
  error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

/// The endpoint of an origin whose host is an IP address, if it is one.
std::optional<tcp::endpoint> literal_endpoint(const origin& where) {
  error_code ec;
  const auto address = asio::ip::make_address(where.host, ec);
  if (ec) return std::nullopt;
  unsigned port = 0;
  const char* const end = where.port.data() + where.port.size();
  const auto [stop, problem] = std::from_chars(where.port.data(), end, port);
  if (problem != std::errc{} || stop != end || port > 65535) return std::nullopt; // the resolver will say why
  return tcp::endpoint(address, static_cast<unsigned short>(port));
}

} // namespace

asio::awaitable<error_code> establish(const origin& where, tls_context& tls, std::size_t buffer_limit,
                                      connection_pool& pool, lease& held, exchange& x) {
  auto ex = co_await asio::this_coro::executor;
  const auto cancel_state = co_await asio::this_coro::cancellation_state;
  tcp::socket socket(ex);
  if (const auto address = literal_endpoint(where)) {
    // An address needs no lookup. Asio 1.81 runs lookups one at a time on a
    // background thread, where cancellation cannot reach a getaddrinfo
    // already running: a slow DNS server would hold this attempt up too.
    x.reached = stage::connecting;
    x.phases.enter(phase::connect, phase_timings::clock::now());
    if (cancellation_requested(cancel_state)) co_return asio::error::operation_aborted;
    auto [connect_ec] = co_await socket.async_connect(*address, asio::as_tuple(asio::use_awaitable));
    if (connect_ec) co_return connect_ec;
  } else {
    x.reached = stage::resolving;
    x.phases.enter(phase::lookup, phase_timings::clock::now());
    if (cancellation_requested(cancel_state)) co_return asio::error::operation_aborted;
    pool.note_lookup();
    auto [resolve_ec, endpoints] =
        co_await async_resolve_abandonable(ex, where.host, where.port, asio::as_tuple(asio::use_awaitable));
    if (resolve_ec) co_return resolve_ec;

    x.reached = stage::connecting;
    x.phases.enter(phase::connect, phase_timings::clock::now());
    if (cancellation_requested(cancel_state)) co_return asio::error::operation_aborted;
    auto [connect_ec, endpoint] = co_await asio::async_connect(socket, endpoints, asio::as_tuple(asio::use_awaitable));
    if (connect_ec) co_return connect_ec;
  }
  socket.set_option(tcp::no_delay(true));
  pool.note_opened();
  if (!where.tls) {
    held.attach(std::make_unique<connection>(std::move(socket)));
    held.get()->buffer.max_size(buffer_limit);
    co_return error_code{};
  }

  x.reached = stage::handshaking;
  x.phases.enter(phase::tls, phase_timings::clock::now());
  held.attach(std::make_unique<connection>(std::move(socket), tls.get()));
  held.get()->buffer.max_size(buffer_limit);
  auto& stream = std::get<connection::tls_stream>(held.get()->stream);
  // SNI carries host names only, never address literals (RFC 6066 §3).
  if (!is_ip_literal(where.host) && !SSL_set_tlsext_host_name(stream.native_handle(), where.host.c_str()))
    co_return error_code(static_cast<int>(::ERR_get_error()), asio::error::get_ssl_category());
  stream.set_verify_callback(ssl::host_name_verification(where.host));
  if (cancellation_requested(cancel_state)) co_return asio::error::operation_aborted;
  auto [handshake_ec] = co_await stream.async_handshake(ssl::stream_base::client, asio::as_tuple(asio::use_awaitable));
  co_return handshake_ec;
}

} // namespace detail
} // namespace coretry::http
