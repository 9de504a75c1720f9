#ifndef CORETRY_REDIS_URL_HPP
#define CORETRY_REDIS_URL_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace coretry::redis {

/// Where a Redis server is and how to log in: what a
/// `redis://[[USER][:PASSWORD]@]HOST[:PORT][/DB]` URL names, or a
/// `rediss://` one (the same, over TLS). `redis://USER@HOST...` names the
/// user alone, its password given outside the URL (use_credentials()).
struct endpoint {
  /// TLS (`rediss://`): the server's certificate is verified against HOST.
  bool tls = false;
  /// A DNS name or an IP address (an IPv6 address without its brackets).
  std::string host;
  std::uint16_t port = 6379;
  /// AUTH's user name (Redis 6 ACLs), when the URL has one.
  std::optional<std::string> user;
  /// AUTH's password, percent-decoded; empty: no AUTH. Never printed.
  std::string password;
  /// The database SELECTed after connecting (0 to 1000000).
  unsigned db = 0;
};

/// Why `url` is not a usable Redis URL, or nullopt when it is: a scheme
/// other than `redis` or `rediss`, no host, a host that is not a DNS name or an IP
/// address, a port that is not 1-65535, a database that is not a number up
/// to 1000000, a query or fragment, a bad percent escape, a URL over 4096
/// bytes. The message never contains the password.
std::optional<std::string> url_problem(std::string_view url);

/// Reads `url`. Throws std::invalid_argument with url_problem's message.
endpoint parse_url(std::string_view url);

/// Why `user` and `password` cannot be AUTH's, or nullopt: a password that
/// is empty, either longer than 512 bytes, or holding NUL, CR or LF. The
/// message names neither.
std::optional<std::string> credentials_problem(std::string_view user, std::string_view password);

} // namespace coretry::redis

#endif
