#ifndef CORETRY_HTTP_CLIENT_OPTIONS_HPP
#define CORETRY_HTTP_CLIENT_OPTIONS_HPP
/// @file
/// The settings of a client and its connection pool (client_options).

#include <coretry/http/addresses.hpp>
#include <coretry/http/balance_mode.hpp>
#include <coretry/policy.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
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
  /// How requests to a name with several addresses are spread over them:
  /// least_cost (the default) chooses each request's address by power of
  /// two choices over latency and requests in flight, for a new connection
  /// and among pooled ones; first_to_connect sends new connections to
  /// whichever address connects first and reuses any pooled connection. A
  /// name with one address is the same in both.
  balance_mode balance = balance_mode::least_cost;
};

} // namespace coretry::http

#endif
