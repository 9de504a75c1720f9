#ifndef CORETRY_BOOKSTORE_BOOKSTORE_HPP
#define CORETRY_BOOKSTORE_BOOKSTORE_HPP

#include <coretry/stop_reason.hpp>

#include "bookstore/options.hpp"

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
