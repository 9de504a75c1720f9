#ifndef CORETRY_HTTP_PROXY_HPP
#define CORETRY_HTTP_PROXY_HPP

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace coretry::http {

/// A proxy as client_options::proxy names it, read strictly.
struct proxy_parts {
  std::string host; ///< lower-case; an IPv6 address without its brackets
  std::uint16_t port = 1080;
  /// "Basic ..." from the URL's user information, empty without one.
  std::string authorization;
  /// The URL fit to show: user information redacted.
  std::string shown;
};

/// Reads a proxy URL: `http://[user[:password]@]host[:port]`, or `host[:port]`
/// (taken as http://). The port defaults to 1080, as curl's does. Only plain
/// HTTP proxies are taken: an `https://` proxy URL (TLS to the proxy itself)
/// is refused, and so are other schemes (socks5://...), a path, a query or a
/// fragment. Throws std::invalid_argument naming the problem, the URL quoted
/// with its credentials redacted.
proxy_parts parse_proxy_url(std::string_view url);

/// Why parse_proxy_url would refuse `url`, or nullopt.
std::optional<std::string> proxy_url_problem(std::string_view url);

/// Whether `host` (as url_parts::host holds it: lower-case, an IPv6 address
/// without brackets) is reached directly according to a NO_PROXY list, as
/// curl reads one: entries separated by commas (spaces around them
/// ignored), `*` alone for every host, a name matching itself and every name
/// below it (`example.com` and `.example.com` both match `api.example.com`),
/// an IP address matching itself, and an address with a prefix length
/// (`10.0.0.0/8`, `fd00::/8`) matching the addresses in that network. Names
/// compare without case and without a final dot. Ports are not part of an entry.
bool bypasses_proxy(std::string_view no_proxy, std::string_view host);

/// The proxy settings a program takes from its environment, as curl does.
struct proxy_environment {
  std::string proxy;    ///< empty: none
  std::string no_proxy; ///< empty: none
  /// The variable each came from, for messages ("HTTPS_PROXY"), empty when unset.
  std::string proxy_variable;
};

/// curl's rules: for an https:// origin `https_proxy`, then `HTTPS_PROXY`;
/// for an http:// origin `http_proxy` only (never `HTTP_PROXY`, which a CGI
/// program's environment gets from a request's `Proxy:` header); then
/// `all_proxy`, then `ALL_PROXY`. The first variable that is set decides
/// (set and empty: no proxy). `no_proxy` before `NO_PROXY` likewise.
/// `lookup` returns a variable's value or null (std::getenv by default).
proxy_environment proxy_from_environment(bool tls_origin,
                                         const std::function<const char*(const char*)>& lookup = {});

/// How a proxy refused to open a tunnel (CONNECT, for an https:// origin).
/// The request never reached the origin in either case.
enum class proxy_error {
  /// A complete answer other than 2xx; its status is exchange::proxy_status.
  refused = 1,
  /// No usable answer: malformed, over client_options::header_limit, or
  /// followed by bytes before the TLS handshake began.
  bad_answer,
};

const boost::system::error_category& proxy_error_category() noexcept;
boost::system::error_code make_error_code(proxy_error e) noexcept;

} // namespace coretry::http

template <>
struct boost::system::is_error_code_enum<coretry::http::proxy_error> : std::true_type {};

#endif
