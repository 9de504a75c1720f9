#ifndef CORETRY_HTTP_CLIENT_HPP
#define CORETRY_HTTP_CLIENT_HPP
/// @file
/// The HTTP client (client) and, through the headers it includes, all it is
/// used with: its settings (client_options.hpp), a request's settings
/// (request_options.hpp), its counters (client_stats.hpp) and its errors
/// (client_error.hpp).

#include <coretry/async_retry.hpp>
#include <coretry/http/addresses.hpp>
#include <coretry/http/classify.hpp>
#include <coretry/http/client_error.hpp>
#include <coretry/http/client_options.hpp>
#include <coretry/http/client_stats.hpp>
#include <coretry/http/exchange.hpp>
#include <coretry/http/redirect.hpp>
#include <coretry/http/request_options.hpp>
#include <coretry/http/url.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coretry::http {

namespace detail {
struct client_state;
struct prepared_request;
struct redirect_chain;

} // namespace detail

/// An HTTP/1.1 and HTTPS client whose requests are retrying operations of the
/// coretry engine. Each attempt's deadline covers waiting for a connection,
/// DNS, connect, TLS handshake, writing and reading the complete body, and
/// reaches the I/O as terminal cancellation; a connection whose attempt did
/// not end cleanly is closed, never pooled. No connection or permit is held
/// while the engine sleeps between attempts.
///
/// Thread-safe: one client may serve coroutines on many threads. Like any
/// Asio I/O object, destroy it before its execution context: its pooled
/// connections are sockets of that context.
class client {
public:
  /// Throws std::invalid_argument naming the problem for options that make
  /// no sense (a negative timeout, no connection per origin, an unreadable
  /// CA file).
  explicit client(boost::asio::any_io_executor ex, client_options options = {});
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// Sends `req` to `url` (http:// or https://; the request's target is taken
  /// from the URL unless the request sets one). Completion:
  /// void(std::exception_ptr, coretry::http::result). Per-operation
  /// cancellation: terminal and partial, as async_retry.
  /// Throws std::invalid_argument naming the problem (bad URL, a header
  /// value with CR or LF, an invalid policy) before anything is sent.
  template <class CompletionToken>
  auto async_send(std::string_view url, request req, const request_options& options, CompletionToken&& token);

  pool_stats stats() const;
  /// Ejections and connection races so far (outlier_ejection).
  address_stats addresses() const;
  /// Closes every idle connection now.
  void close_idle();
  boost::asio::any_io_executor get_executor() const;

private:
  struct prepared {
    std::shared_ptr<const detail::prepared_request> request;
    retry_options retry;
  };
  prepared prepare(std::string_view url, request&& req, const request_options& options) const;
  static prepared prepare_parts(detail::client_state& state, url_parts&& parts, request&& req,
                                const request_options& options);
  /// A request that follows redirects: its first hop prepared (throws as
  /// async_send does), nothing sent.
  std::shared_ptr<detail::redirect_chain> start_chain(std::string_view url, request&& req,
                                                      const request_options& options) const;
  /// Runs the chain's hops, one retrying operation each, and completes
  /// `handler` (on `ex`, cancellation heard from `slot`) with the last one's
  /// outcome, the chain's attempts and hops in it.
  static void follow_redirects(std::shared_ptr<detail::redirect_chain> chain, boost::asio::any_io_executor ex,
                               boost::asio::cancellation_slot slot,
                               boost::asio::any_completion_handler<retry_signature<exchange>> handler);
  /// Starts the chain's current hop.
  static void run_hop(std::shared_ptr<detail::redirect_chain> chain);
  /// The attempts of `request`: a deferred operation each, started by the
  /// engine with its own handler, whose executor is where the attempt runs.
  static auto attempt_factory(std::shared_ptr<detail::client_state> state,
                              std::shared_ptr<const detail::prepared_request> request, boost::asio::any_io_executor io) {
    return [state = std::move(state), request = std::move(request),
            io = std::move(io)](attempt_context<std::chrono::steady_clock> context) {
      return boost::asio::async_initiate<const boost::asio::deferred_t&, void(std::exception_ptr, exchange)>(
          [](auto handler, std::shared_ptr<detail::client_state> s, std::shared_ptr<const detail::prepared_request> r,
             attempt_context<std::chrono::steady_clock> c, const boost::asio::any_io_executor& fallback) {
            using handler_type = decltype(handler);
            boost::asio::any_io_executor ex = boost::asio::get_associated_executor(handler, fallback);
            // The operation keeps its own cancellation state on the handler's
            // slot: the erased handler is given none (it would put a second
            // one there).
            boost::asio::cancellation_slot slot = boost::asio::get_associated_cancellation_slot(handler);
            constexpr bool default_allocator =
                std::is_same_v<boost::asio::associated_allocator_t<handler_type, boost::asio::recycling_allocator<void>>,
                               boost::asio::recycling_allocator<void>>;
            start_attempt(std::move(s), std::move(r), c, std::move(ex), slot, default_allocator,
                          boost::asio::bind_cancellation_slot(boost::asio::cancellation_slot(), std::move(handler)));
          },
          boost::asio::deferred, state, request, context, io);
    };
  }
  static auto classifier_of(std::shared_ptr<detail::client_state> state,
                            std::shared_ptr<const detail::prepared_request> request) {
    return [state = std::move(state), request = std::move(request)](const boost::system::error_code& ec,
                                                                     const exchange& x) {
      return classify(*state, *request, ec, x);
    };
  }
  /// One attempt, a composed operation: every step on `ex` (the handler's
  /// executor), cancellation heard from `slot` (the handler's), its state
  /// allocated with the handler's allocator, or from the thread's block
  /// cache when `default_allocator` (the handler names none).
  static void start_attempt(std::shared_ptr<detail::client_state> state,
                            std::shared_ptr<const detail::prepared_request> request,
                            attempt_context<std::chrono::steady_clock> context, boost::asio::any_io_executor ex,
                            boost::asio::cancellation_slot slot, bool default_allocator,
                            boost::asio::any_completion_handler<void(std::exception_ptr, exchange)> handler);
  /// Classifies an attempt and tells the address it used how it went.
  static verdict classify(detail::client_state& state, const detail::prepared_request& request,
                          const boost::system::error_code& ec, const exchange& x);

  std::shared_ptr<detail::client_state> state_;
};

template <class CompletionToken>
auto client::async_send(std::string_view url, request req, const request_options& options,
                        CompletionToken&& token) {
  // A request that follows redirects is a chain of retrying operations;
  // one that does not is one, as it always was.
  std::shared_ptr<detail::redirect_chain> chain;
  prepared p;
  if (options.redirects.follow) {
    chain = start_chain(url, std::move(req), options);
  } else {
    p = prepare(url, std::move(req), options);
    // Refused from this call whatever the token, as async_retry does.
    if (auto problem = retry_setup_problem(options.policy, p.retry)) throw std::invalid_argument(*problem);
  }
  return boost::asio::async_initiate<CompletionToken, retry_signature<exchange>>(
      [](auto handler, std::shared_ptr<detail::client_state> state, const boost::asio::any_io_executor& io,
         prepared p, const coretry::policy& policy, std::shared_ptr<detail::redirect_chain> chain) {
        if (chain) {
          boost::asio::any_io_executor ex = boost::asio::get_associated_executor(handler, io);
          boost::asio::cancellation_slot slot = boost::asio::get_associated_cancellation_slot(handler);
          // The erased handler is invoked directly, never given to an
          // operation: its slot is the one each hop's operation is bound to.
          follow_redirects(std::move(chain), std::move(ex), slot,
                           boost::asio::any_completion_handler<retry_signature<exchange>>(std::move(handler)));
          return;
        }
        coretry::async_retry<boost::asio::steady_timer>(io, policy, p.retry, attempt_factory(state, p.request, io),
                                                        classifier_of(state, p.request), std::move(handler));
      },
      token, state_, get_executor(), std::move(p), options.policy, std::move(chain));
}

} // namespace coretry::http

#endif
