#ifndef CORETRY_HTTP_CLIENT_HPP
#define CORETRY_HTTP_CLIENT_HPP

#include <coretry/async_retry.hpp>
#include <coretry/http/addresses.hpp>
#include <coretry/http/classify.hpp>
#include <coretry/http/exchange.hpp>
#include <coretry/http/redirect.hpp>
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

/// Settings of a client and its connection pool.
struct client_options {
  /// Limit for resolving, connecting and the TLS handshake together, inside
  /// the attempt's own deadline. Zero: only the attempt deadline applies.
  duration connect_timeout = duration::zero();
  /// Longest silence while reading a response. The complete-response deadline
  /// (the attempt's) is enforced as well: a server dripping one byte just
  /// inside this limit is still cut off at the attempt deadline. Zero: none.
  duration idle_timeout = duration::zero();
  /// Connections (leased plus idle) per origin; further attempts wait for one,
  /// inside their deadline.
  std::size_t max_connections_per_origin = 32;
  /// Idle connections older than this are closed instead of reused.
  duration pool_idle_timeout = std::chrono::seconds(30);
  /// Response limits (Beast's defaults); exceeding one is permanent.
  std::uint32_t header_limit = 8 * 1024;
  std::uint64_t body_limit = 8 * 1024 * 1024;
  /// Longest chunk-size line (with its extensions) and trailer section of a
  /// chunked body. The connection's read buffer holds at most
  /// header_limit + line_limit bytes, whatever the server sends: a line that
  /// does not fit ends the attempt with response_error::line_too_long.
  std::uint32_t line_limit = 4 * 1024;
  /// Interim (1xx) responses skipped before the final one; one more ends
  /// the attempt with response_error::too_many_interim_responses.
  unsigned max_interim_responses = 8;
  /// An extra trust anchor (PEM) besides the system's store.
  std::string ca_file;
  /// Peer verification is on unless a caller turns it off explicitly.
  bool verify_peer = true;
  /// A client certificate (PEM file, optionally followed by its chain) sent
  /// when an https:// server asks for one, and its private key (PEM file;
  /// empty: the key is in certificate_file). A key encrypted with a
  /// password needs private_key_password. Checked when the client is made
  /// (tls_files_problem): a missing, unreadable or mismatched file
  /// is std::invalid_argument, before anything is sent.
  std::string certificate_file;
  std::string private_key_file;
  std::string private_key_password;
  /// A proxy every request goes through, unless its host is in no_proxy:
  /// `http://[user[:password]@]host[:port]` (parse_proxy_url; https://
  /// proxies are refused). An https:// origin is reached through a CONNECT
  /// tunnel, TLS end to end, the certificate verified against the origin's
  /// name; an http:// origin's request is sent to the proxy in absolute form.
  /// The URL's credentials go to the proxy alone, as Proxy-Authorization.
  /// Empty: no proxy. The client reads no environment variable:
  /// proxy_from_environment is the programs' way to curl's.
  std::string proxy;
  /// Hosts reached directly, as NO_PROXY lists them (bypasses_proxy).
  std::string no_proxy;
  std::string user_agent = "coretry/0.1";
  /// Names pinned to addresses, curl's `--resolve` entries:
  /// "HOST:PORT:ADDR[,ADDR...]" (parse_resolve_entry; at most 1,024
  /// entries). A pinned name is never looked up.
  std::vector<std::string> resolve;
  /// Happy Eyeballs v2's connection attempt delay (RFC 8305 §5): when a
  /// name has several addresses, a new connection tries the next one after
  /// this long without an answer from the one before (at once when one
  /// fails), families interleaved, inside the connect timeout and the
  /// attempt's deadline; the first to connect wins, the others are closed.
  /// At least 10 ms (RFC 8305).
  duration connection_attempt_delay = std::chrono::milliseconds(250);
  /// How long a lookup's addresses are used before the name is looked up
  /// again (also at once when every address failed at its last try). Zero:
  /// every new connection looks the name up.
  duration lookup_ttl = std::chrono::seconds(30);
  /// When an address that keeps failing is left out for a while.
  outlier_ejection ejection;
};

/// Per-request settings.
struct request_options {
  /// The retry policy, hedging included (policy::hedging): a hedge is an
  /// attempt of its own, on another connection of the pool (a new one when
  /// none is idle); a losing attempt is cancelled and its connection closed,
  /// never pooled. Hedging needs a request that is safe to repeat, a body
  /// held in memory (not `body`) and no streamed response (`stream_body`):
  /// async_send throws std::invalid_argument otherwise.
  coretry::policy policy{};
  /// Bounded route template for events and metrics ("/books/{id}"), never
  /// the URL with its query. Must outlive the request; a literal does.
  std::string_view route = "request";
  /// Send this Idempotency-Key on every attempt: the same key and the same
  /// payload each time. Makes POST and PATCH retryable.
  std::optional<std::string> idempotency_key;
  /// Generate a random UUID key for this logical request (ignored when a key
  /// is given or the request already has an Idempotency-Key header).
  bool generate_idempotency_key = false;
  /// Consulted in order before the default table (classify_exchange).
  std::vector<classifier_extension> classifiers;
  /// Called on a complete 2xx response: return a problem to reject it
  /// permanently ("asked for 40 characters, got 12").
  std::function<std::optional<std::string>(const response&)> validate;
  /// For a body that is not held in memory: returns the body for attempt N,
  /// reopened; nullopt when it cannot be reproduced (the attempt then fails
  /// permanently instead of sending a consumed stream).
  std::function<std::optional<std::string>(unsigned attempt)> body;
  /// Streams response bodies instead of keeping them in `response::body()`.
  /// `stream_body` is called for each final response that has a body (not
  /// for HEAD, 204, 304 or a zero Content-Length), on every attempt, with
  /// its header, as soon as the header is parsed. When it returns true, that
  /// body is passed to `body_sink` piece by piece as it is parsed, in order
  /// (each piece no larger than the connection's read buffer), and
  /// `response::body()` stays empty: memory stays bounded whatever the size,
  /// and client_options::body_limit does not apply to that body (the sink
  /// bounds it). Bodies it declines are kept in memory, limit included.
  /// Both run on the operation's executor, between two reads of the
  /// connection. A non-zero error from `body_sink` ends the attempt with that
  /// error and closes the connection; an error the default classification
  /// does not know is permanent (a classifier may decide otherwise). A
  /// retried attempt's body starts over: a sink that keeps bytes must start
  /// again at each attempt (retry_observer::attempt_started). Both must be
  /// set for either to apply.
  std::function<bool(const boost::beast::http::response_header<>& header)> stream_body;
  std::function<boost::system::error_code(std::string_view piece)> body_sink;
  /// Called with each attempt's own copy of the request just before it is
  /// sent: for headers that differ per attempt, such as an attempt count or
  /// the time left for a downstream deadline (`context.deadline`). Header
  /// values it sets are checked for CR and LF like the caller's.
  std::function<void(request&, const attempt_context<std::chrono::steady_clock>& context)> decorate;
  retry_budget* budget = nullptr;
  /// As retry_options::gate: told every attempt's result, asked before every retry.
  retry_gate* gate = nullptr;
  /// As retry_options::limit: every attempt holds one of its permits until
  /// its exchange has ended; none free (after a short wait) stops the
  /// request with stop_reason::concurrency_limited, before anything is sent.
  concurrency_limit* limit = nullptr;
  /// As retry_options::tracker: told every attempt's latency, read for an
  /// observed attempt limit (policy::observed, which needs one).
  latency_tracker* tracker = nullptr;
  retry_observer* observer = nullptr;
  /// Told each attempt's phase timings (exchange::phases) when its exchange
  /// ends, with this request's route.
  phase_observer* phases = nullptr;
  random_source* random = nullptr;
  /// Following redirects (off by default): the rules and their defaults
  /// are redirect_options'. Each hop followed is in exchange::redirects.
  redirect_options redirects{};
};

/// Connection pool counters, for tests and metrics.
struct pool_stats {
  std::size_t open = 0;    ///< leased + idle
  std::size_t idle = 0;
  std::size_t leased = 0;
  std::size_t waiting = 0; ///< attempts waiting for a connection
  std::uint64_t connections_opened = 0;
  std::uint64_t stale_discarded = 0; ///< idle connections found closed by the server (or holding stray bytes)
  std::uint64_t lookups = 0;         ///< host-name lookups started (an IP-address host needs none)
};

/// What the client refuses in a response beyond Beast's own errors
/// (header_limit, body_limit). Each one is permanent: the server would send
/// the same again.
enum class response_error {
  line_too_long = 1,          ///< a chunk-size line, chunk extension or trailer section over line_limit
  too_many_interim_responses, ///< more 1xx responses than max_interim_responses
};

const boost::system::error_category& response_error_category() noexcept;
boost::system::error_code make_error_code(response_error e) noexcept;

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

template <>
struct boost::system::is_error_code_enum<coretry::http::response_error> : std::true_type {};

#endif
