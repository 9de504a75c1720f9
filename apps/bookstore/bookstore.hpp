#ifndef CORETRY_BOOKSTORE_BOOKSTORE_HPP
#define CORETRY_BOOKSTORE_BOOKSTORE_HPP

#include <coretry/concurrency_limit.hpp>
#include <coretry/gate.hpp>
#include <coretry/http/balance_mode.hpp>
#include <coretry/http/tls.hpp>
#include <coretry/policy.hpp>
#include <coretry/stop_reason.hpp>

#include "serving/serving.hpp"

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <string_view>

// The bookstore of the specification: an HTTP server answering
// `GET /books/{id}` by asking a pricing service through coretry's client.
//
// Headers between services (all lower-case, integers in decimal):
//   x-coretry-deadline-ms   the time the caller still waits, in whole
//                           milliseconds (like Envoy's
//                           x-envoy-expected-rq-timeout-ms). Clamped to
//                           max_deadline; the server keeps `reserve` for
//                           itself and gives the rest to its outgoing call,
//                           and sends each attempt the time until that
//                           attempt's deadline in the same header.
//   x-coretry-attempt       the sender's attempt number, 1 for the first
//                           (like x-envoy-attempt-count).
//   x-coretry-retries: upstream
//                           retries are owned by a caller further up: make
//                           a single attempt.
// With coordination on, a request with attempt > 1 or the `upstream` marker
// is served with a single downstream attempt, and every outgoing request
// carries the marker (this server, or one above it, owns the retries). With
// coordination off the server ignores both headers and sends neither.
namespace coretry::bookstore {

inline constexpr std::string_view deadline_header = "x-coretry-deadline-ms";
inline constexpr std::string_view attempt_header = "x-coretry-attempt";
inline constexpr std::string_view retries_header = "x-coretry-retries";
inline constexpr std::string_view retries_owned_upstream = "upstream";

struct options {
  /// IP:PORT; port 0 picks a free one.
  std::string listen = "127.0.0.1:8080";
  /// The pricing service; "{id}" in it is replaced by the book id (so a
  /// bookstore can forward to another bookstore: http://host:port/books/{id}).
  std::string pricing_url;
  /// With an https:// pricing URL: a PEM CA file trusted besides the
  /// system's store (empty: the system's store alone).
  std::string pricing_ca_file;
  /// The outgoing call's policy. Its overall_deadline is replaced per
  /// request by the propagated deadline. With policy.observed set, one
  /// latency tracker for pricing (coretry::latency_tracker, 10 s window)
  /// is shared by all handlers and threads, and each attempt's limit comes
  /// from it.
  coretry::policy policy{};
  /// The longest a caller may ask this server to work, and the default when
  /// the request carries no deadline header.
  std::chrono::milliseconds max_deadline{1000};
  /// Kept back from the caller's deadline to answer.
  std::chrono::milliseconds reserve{10};
  /// One token bucket (capacity 20, 0.1 token per request) for the pricing
  /// dependency, shared by all handlers and threads.
  bool budget = true;
  /// One retry gate (coretry::local_gate) for the pricing dependency, shared
  /// by all handlers and threads: while pricing mostly fails it holds retries
  /// back and lets only probes through. A call it stops is answered 503, with
  /// Retry-After while the gate is not open (see answer_for).
  bool gate = true;
  /// The gate's rule: health window, thresholds, probe interval, longest
  /// hold. The library's defaults, except the longest hold: 100 ms (one
  /// probe interval), not 10 s. A server's callers wait on its answer: a
  /// retry whose slot is not the next one is stopped at once (a quick 503
  /// with Retry-After) rather than held for most of its deadline.
  coretry::local_gate::options gate_options = [] {
    coretry::local_gate::options o;
    o.max_hold = std::chrono::milliseconds(100);
    return o;
  }();
  /// One concurrency limit (coretry::concurrency_limit) on pricing's
  /// attempts in flight, shared by all handlers and threads: adaptive (the
  /// library's defaults), fixed (`adaptive` off, `initial_limit` permits),
  /// or none (empty). A call that gets no permit is answered 503 at once,
  /// with x-coretry-stop: concurrency_limited, and pricing is not called.
  std::optional<coretry::concurrency_limit::options> concurrency_limit = coretry::concurrency_limit::options{};
  /// Share the budget and the gate with every bookstore that names the same
  /// Redis and prefix (coretry::redis::shared_state): a
  /// `redis://[[USER][:PASSWORD]@]HOST[:PORT][/DB]` URL (`rediss://` over
  /// TLS), or empty for a budget and a gate of this process's own. Needs
  /// coretry::redis (hiredis).
  std::string shared_state;
  /// AUTH's user name and password from outside the URL
  /// (read_shared_state_credentials()); a password in the URL wins
  /// (coretry::redis::use_credentials). Never printed.
  std::optional<std::string> shared_state_user;
  std::string shared_state_password;
  /// The file AUTH's password is read from (read_shared_state_credentials()).
  std::string shared_state_password_file;
  /// With `rediss://`: a CA file trusted besides the system's store, and a
  /// client certificate and key for a Redis that asks for one.
  coretry::http::tls_files shared_state_tls;
  /// First part of the shared keys: PREFIX:{pricing}:...
  std::string shared_state_prefix = "coretry";
  /// Time between two exchanges with Redis.
  std::chrono::milliseconds reconcile_period{50};
  /// Told of each new problem with Redis and of sharing resuming (empty),
  /// never of a password. Default: nothing.
  std::function<void(std::string_view)> on_shared_state_problem;
  /// Honour and send the attempt-count and retry-owner headers.
  bool coordination = true;
  /// At shutdown, how long attempts already sent may take to finish before
  /// they are cancelled. Backoff sleeps are cancelled at once.
  std::chrono::milliseconds shutdown_grace{1000};
  /// Connections the client keeps to the pricing service.
  std::size_t max_connections = 64;
  /// Pricing's name pinned to addresses, curl's --resolve entries
  /// ("HOST:PORT:ADDR[,ADDR...]", coretry::http::parse_resolve_entry): a
  /// fleet behind one name, raced and ejected by the client.
  std::vector<std::string> pricing_resolve;
  /// How a call picks among pricing's addresses (when its name has
  /// several): the balancer's least cost (the default) or the first to
  /// connect (coretry::http::balance_mode).
  coretry::http::balance_mode pricing_balance = coretry::http::balance_mode::least_cost;
  /// Bounds on each incoming request: header 8 KiB, body 64 KiB, read buffer
  /// 16 KiB (chunk-size lines and trailers), the header within 10 s, 30 s of
  /// keep-alive silence, each response out of the socket within 10 s. Too
  /// large: 431 or 413; malformed: 400; a read timeout closes the
  /// connection, a send timeout resets it. Each counted in /metrics.
  coretry::serving::request_limits limits = default_limits();
  /// Client connections open at once. At the cap the connection idle the
  /// longest (kept alive, its response taken, no byte of a next request yet)
  /// is closed to admit a new one; with none idle, new ones wait in the
  /// listen backlog until one closes.
  std::size_t max_clients = 512;

  static coretry::serving::request_limits default_limits() {
    coretry::serving::request_limits limits;
    limits.body_bytes = 64 * 1024;
    return limits;
  }
};

/// The largest accepted options::max_clients.
inline constexpr std::size_t most_clients = 100'000;

/// Throws std::invalid_argument naming the problem.
void validate(const options& opts);

/// With options::shared_state set, fills shared_state_user and
/// shared_state_password from the environment and the password file
/// (coretry::redis::read_credentials: CORETRY_REDIS_USERNAME, and
/// shared_state_password_file or else CORETRY_REDIS_PASSWORD). Throws
/// std::invalid_argument naming the variable or file, never a password.
void read_shared_state_credentials(options& opts);

/// `--attempt-timeout`: whole milliseconds ("250", 1 to 3,600,000) set
/// p.attempt_limit and clear p.observed; a percentile of recent successful
/// attempts ("p99.9", above 0 and at most 100) sets p.observed's percentile
/// (an observed limit with the library's defaults where p.observed was
/// empty). Throws std::invalid_argument naming the problem.
void apply_attempt_timeout(std::string_view text, coretry::policy& p);

/// `--hedge-after`: whole milliseconds ("10", 1 to 60,000) set
/// p.hedging.delay and clear its delay_percentile; a percentile of recent
/// successful attempts ("p95", above 0 and at most 100) sets
/// p.hedging.delay_percentile (the delay then follows pricing's latency
/// tracker). max_hedges is left to the caller. Throws std::invalid_argument
/// naming the problem.
void apply_hedge_after(std::string_view text, coretry::policy& p);
/// `--concurrency-limit`: "adaptive" (the library's adaptive limit), "off"
/// (none), or a fixed number of permits N (1 to 100000). Throws
/// std::invalid_argument naming the problem.
void apply_concurrency_limit(std::string_view text, options& opts);

/// How a pricing call that did not succeed is answered.
struct failure_answer {
  unsigned status = 503;
  /// The Retry-After header in whole seconds, when there is one.
  std::optional<std::chrono::seconds> retry_after;
};

/// The one mapping from a failed call to its answer: rejected (a permanent
/// failure) 502; stopped by the gate (dependency_unhealthy) 503; out of time
/// (deadline_exhausted, or a last attempt that timed out) 504; anything else
/// 503. A call the gate stopped while the gate is not open (`gate_open`
/// false) carries Retry-After: the gate's probe interval (it lets one retry
/// through per interval while it holds them), rounded up to whole seconds
/// and at least 1. Once the gate is open again, no Retry-After.
failure_answer answer_for(stop_reason reason, bool timed_out, bool gate_open, duration probe_interval);

/// Builds the URL of the pricing call for `book_id`.
std::string pricing_target(std::string_view pricing_url, std::string_view book_id);

/// A whole, non-negative decimal number of a header (milliseconds, an
/// attempt count): digits only, leading zeros allowed, more than fits in
/// 64 bits clamped to INT64_MAX; nullopt for anything else.
std::optional<std::int64_t> parse_whole_number(std::string_view text);

/// Whether `id` may be a book id and forwarded: 1 to 64 of [A-Za-z0-9._-],
/// and not a dot segment ("." or ".."), which path normalisation would change.
bool valid_book_id(std::string_view id);

/// The server. Listens from construction on; runs on the caller's
/// io_context, which may be run by any number of threads.
class server {
public:
  /// Throws std::invalid_argument for bad options, system_error if it cannot bind.
  server(boost::asio::io_context& io, options opts);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  unsigned short port() const;
  std::string base_url() const;

  /// The /metrics text (Prometheus exposition format).
  std::string metrics() const;

  /// Stops accepting, closes idle connections, cancels backoff sleeps at
  /// once and in-flight attempts after options.shutdown_grace; connections
  /// close after their current response. `done` (optional) runs once every
  /// connection is closed, after which the server holds no work on the
  /// io_context. Callable from any thread, more than once.
  void shutdown(std::function<void()> done = {});

  /// Connections open now.
  std::size_t open_connections() const;

private:
  class state;
  std::shared_ptr<state> state_;
};

} // namespace coretry::bookstore

#endif
