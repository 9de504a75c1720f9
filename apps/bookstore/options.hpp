#ifndef CORETRY_BOOKSTORE_OPTIONS_HPP
#define CORETRY_BOOKSTORE_OPTIONS_HPP

#include <coretry/concurrency_limit.hpp>
#include <coretry/gate.hpp>
#include <coretry/http/balance_mode.hpp>
#include <coretry/http/tls.hpp>
#include <coretry/policy.hpp>

#include "serving/serving.hpp"

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// The bookstore's options, their checks and the parsers of the command
// line's compound values.
namespace coretry::bookstore {

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

} // namespace coretry::bookstore

#endif
