#ifndef CORETRY_HTTP_URL_HPP
#define CORETRY_HTTP_URL_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace coretry::http {

/// What an http(s) URL names, read strictly: the authority is split by hand
/// (Boost.URL 1.81 reads `127.0.0.1.nip.io:8080` as host `127.0.0.1`), the
/// host percent-decoded and required to be a DNS name or an IP address.
struct url_parts {
  bool tls = false;
  /// The one name that is looked up, sent in Host, used for SNI and verified
  /// against the certificate: lower-case, decoded; an IPv6 address without
  /// its brackets.
  std::string host;
  std::uint16_t port = 0;
  bool explicit_port = false; ///< the URL named a port (Host then names it unless it is the default)
  /// Path and query, beginning with '/' (the fragment is never sent).
  std::string target;
  /// Userinfo (`user:password@`), percent-decoded, when the URL has one.
  std::optional<std::string> user;
  std::string password;
};

/// Throws std::invalid_argument naming the problem, as url_problem words it,
/// after "coretry::http: ".
url_parts parse_url(std::string_view url);

/// Why the client would refuse `url`, or nullopt when it would take it: not
/// an absolute URL (no scheme), a scheme other than http or https, no host,
/// a host that is not a DNS name or an IP address once decoded
/// (`localhost%00.example.com`), an IPv6 zone, a port that is not 1-65535, a
/// path not beginning with '/'. The message quotes the URL with any
/// credentials redacted (redact_url).
std::optional<std::string> url_problem(std::string_view url);

} // namespace coretry::http

#endif
