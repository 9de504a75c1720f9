#ifndef CORETRY_FAULTS_FAULT_SERVER_HPP
#define CORETRY_FAULTS_FAULT_SERVER_HPP

#include "faults/test_pki.hpp"

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
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
//                              with the count of requests it no longer holds
//   /_reset                    forgets all sequences and the log (not logged)
//
// Anything else, and any script it cannot follow, gets a 400 whose plain-text
// body names the problem.
namespace coretry::faults {

struct fault_server_options {
  /// IP:PORT to listen on, IPv6 as [ADDRESS]:PORT; port 0 picks a free one.
  std::string listen = "127.0.0.1:0";
  /// Serve HTTPS instead of HTTP.
  bool tls = false;
  /// With tls, the certificate and key to serve and the CA to publish;
  /// generate_test_pki() with default options (localhost, 127.0.0.1) if empty.
  std::optional<test_pki> pki;
  /// How many requests the log keeps: the most recent ones, so that a server
  /// under a long load test does not grow without bound. 0 keeps none.
  std::size_t log_limit = 10000;
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
  /// `listen` string and boost::system::system_error if it cannot bind.
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
  /// Forgets the log and all sequence positions, like a request to /_reset.
  void clear();

private:
  class state; // shared with the server's coroutines, which may outlive this object
  std::shared_ptr<state> state_;
};

} // namespace coretry::faults

#endif
