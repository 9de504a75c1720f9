#ifndef CORETRY_FAULTS_FAULT_SERVER_HPP
#define CORETRY_FAULTS_FAULT_SERVER_HPP

#include "faults/test_pki.hpp"

#include "serving/serving.hpp"

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

// An HTTP/1.1 server that fails on request, for testing HTTP clients: each
// request's path and query say which status, headers, delays and broken
// connections it gets (grammar in faults/fault_script.hpp), and the server
// remembers what it was sent.
//
//   /status/{code}?options     one scripted response
//   /seq/{name}?steps=...      the k-th request to {name} gets the k-th step
//   /echo                      the request's method, target, headers and body as JSON
//   /_log                      the request log as JSON (not itself logged)
//                              with the count of requests it no longer holds,
//                              of sequences forgotten and of requests refused
//   /_reset                    forgets all sequences and the log (not logged),
//                              and zeroes the capacity counters
//   /capacity/{anything}       waits in a FIFO queue for one of a fixed number
//                              of workers, holds it for the service time (on a
//                              timer), then 200 (capacity_options)
//   /_capacity[?workers=N]     the capacity counters as JSON, after setting the
//                              number of workers to N if asked (not logged)
//
// Against hostile clients every read is bounded (fault_server_options::limits:
// header and body sizes, the read buffer that bounds chunk-size lines and
// trailers, a header timeout and an idle keep-alive timeout), every response
// must leave the socket within a send timeout, open connections are capped
// (max_clients: at the cap the longest idle kept-alive connection is closed
// for a new one, else new connections wait in the listen backlog), an accept
// error pauses the accept loop, and the sequences kept are bounded like the
// log.
//
// Anything else, and any script it cannot follow, gets a 400 whose plain-text
// body names the problem.
namespace coretry::faults {

/// The capacity route, `/capacity/{anything}`: a server of `workers` workers
/// in front of one FIFO queue. A request waits in the queue for a free
/// worker, then holds that worker for `service_time`, spent on a timer (not
/// the CPU), then is answered 200. As in most servers, the queue works off
/// every request it took even when its client has gone: an abandoned request
/// still holds a worker for its full service time when its turn comes (its
/// work is then counted as wasted). A request that finds every worker busy
/// and `queue_limit` requests already waiting is answered 503 at once.
struct capacity_options {
  /// 1 to most_capacity_workers; changeable while the server runs
  /// (`/_capacity?workers=N`).
  std::size_t workers = 8;
  /// 0 to longest_service_time.
  std::chrono::milliseconds service_time{25};
  /// Requests waiting (not yet at a worker), 0 to most_capacity_queue.
  std::size_t queue_limit = 100000;
};

inline constexpr std::size_t most_capacity_workers = 10000;
inline constexpr std::chrono::milliseconds longest_service_time{60000};
inline constexpr std::size_t most_capacity_queue = 1000000;

/// A description of the first value out of bounds, or nullopt.
std::optional<std::string> validate(const capacity_options& options);

struct fault_server_options {
  /// IP:PORT to listen on, IPv6 as [ADDRESS]:PORT; port 0 picks a free one.
  std::string listen = "127.0.0.1:0";
  /// Serve HTTPS instead of HTTP.
  bool tls = false;
  /// With tls, the certificate and key to serve and the CA to publish;
  /// generate_test_pki() with default options (localhost, 127.0.0.1) if empty.
  std::optional<test_pki> pki;
  /// With tls, require a client certificate issued by one of the CAs in this
  /// PEM text: a client without one, or with another, fails the handshake.
  /// Empty: no client certificate is asked for.
  std::string client_ca_pem;
  /// How many requests the log keeps: the most recent ones, so that a server
  /// under a long load test does not grow without bound. 0 keeps none.
  std::size_t log_limit = 10000;
  /// How many /seq names keep their position: beyond it the least recently
  /// used name is forgotten (and starts again from its first step).
  std::size_t sequence_limit = 10000;
  /// Bounds on each request; a violation is answered 431, 413 or 400, a
  /// timeout closes the connection; a response not taken (its bytes not out
  /// of the socket) within send_timeout resets it. Counted in counters() and
  /// /_log.
  coretry::serving::request_limits limits{};
  /// Client connections open at once. At the cap the connection idle the
  /// longest (kept alive, its response taken, no byte of a next request yet)
  /// is closed to admit a new one; with none idle, new ones wait in the
  /// listen backlog until one closes.
  std::size_t max_clients = 512;
  /// The capacity route's workers, service time and queue bound.
  capacity_options capacity{};
  /// The wall clock for Date and Retry-After dates, read once per response;
  /// system_clock::now when empty.
  std::function<std::chrono::system_clock::time_point()> clock;
};

/// What the server refused or forgot, since it started (or /_reset).
struct fault_server_counters {
  std::uint64_t header_timeouts = 0;  ///< a header (or body) that did not arrive in time: closed
  std::uint64_t idle_timeouts = 0;    ///< a kept-alive connection silent too long: closed
  std::uint64_t header_too_large = 0; ///< answered 431
  std::uint64_t body_too_large = 0;   ///< answered 413 (body, chunk-size line or trailer)
  std::uint64_t malformed = 0;        ///< answered 400
  std::uint64_t accept_errors = 0;    ///< accept failures (EMFILE...), each followed by a pause
  std::uint64_t send_timeouts = 0;    ///< a response not taken within the send timeout: reset
  std::uint64_t idle_closed = 0;      ///< idle kept-alive connections closed to admit a client at the cap
  std::uint64_t sequences_evicted = 0; ///< /seq names forgotten beyond sequence_limit
};

struct logged_request {
  std::string method;
  std::string target; ///< As sent: path and query, still percent-encoded.
  std::chrono::steady_clock::duration received; ///< When it was read, since the server started.
  std::optional<std::string> idempotency_key;   ///< The Idempotency-Key field, if sent.
  std::size_t body_length = 0;
  std::uint64_t connection = 0; ///< Which connection it came on: 1 for the first accepted, and so on.
  /// Every other header field as received, except credentials, whose values
  /// are replaced by "[redacted]" (coretry::http::is_sensitive_header).
  std::vector<std::pair<std::string, std::string>> fields;
};

/// Listens from construction on; runs on the caller's io_context, which may
/// be run by any number of threads (the server serialises its own work). No
/// member blocks, and all may be called from any thread.
class fault_server {
public:
  /// Binds and starts accepting. Throws std::invalid_argument for a bad
  /// `listen` string or limits, and boost::system::system_error if it cannot bind.
  explicit fault_server(boost::asio::io_context& io, fault_server_options options = {});
  /// Calls stop().
  ~fault_server();
  fault_server(const fault_server&) = delete;
  fault_server& operator=(const fault_server&) = delete;

  /// The bound port (the chosen one when listening on port 0).
  unsigned short port() const;
  /// "http://ADDRESS:PORT" or "https://...", with a wildcard listen address
  /// replaced by loopback so that the URL can be connected to.
  std::string base_url() const;
  /// The PEM of the CA that clients should trust; empty without tls.
  const std::string& ca_certificate_pem() const;

  /// Closes the acceptor and every connection, cancelling their delays and
  /// drips. Done at once when called from within the server's own handlers,
  /// otherwise as soon as the io_context runs; from then on the server adds
  /// no work, so `run()` returns once the caller's other work is done.
  void stop();

  /// Connections accepted and not yet closed.
  std::size_t open_connections() const;

  /// The most recent requests (at most fault_server_options::log_limit),
  /// except those to /_log and /_reset, oldest first.
  std::vector<logged_request> log() const;
  /// How many requests fell out of the log because it was full.
  std::uint64_t log_dropped() const;
  /// Forgets the log and all sequence positions, like a request to /_reset
  /// (the capacity counters are zeroed on the server's strand, soon after).
  void clear();
  /// The refusals and evictions so far.
  fault_server_counters counters() const;

private:
  class state; // shared with the server's coroutines, which may outlive this object
  std::shared_ptr<state> state_;
};

} // namespace coretry::faults

#endif
