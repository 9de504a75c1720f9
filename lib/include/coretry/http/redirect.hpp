#ifndef CORETRY_HTTP_REDIRECT_HPP
#define CORETRY_HTTP_REDIRECT_HPP

#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>

namespace coretry::http {

/// Whether and how a request follows redirects (RFC 9110 §15.4). Off unless
/// `follow` is set. Followed: 301, 302, 303, 307 and 308 with a non-empty
/// Location; any other status (300, 304, 305, 306 included) and a 3xx
/// without Location is the final answer. The rules:
///   - 307 and 308 keep the method, the body and the Idempotency-Key; 303
///     turns any method but HEAD into GET without a body; 301 and 302 turn a
///     POST into GET without a body (what browsers and curl do), any other
///     method is kept with its body. A request that becomes GET loses its
///     content headers (Content-Type, Content-Length, Content-Encoding,
///     Content-Language, Content-Location, Transfer-Encoding, Digest) and its
///     Idempotency-Key.
///   - A relative Location is resolved against the URL that answered (RFC
///     3986 §5); the fragment of that URL is carried over when the Location
///     has none (§10.2.2). Bytes above 0x7f in a Location are
///     percent-encoded; a Location with a space or a control character, one
///     longer than max_location_length, more than one Location field, or a
///     target the client would refuse as a request URL (url_problem) ends
///     the request as `rejected`, redirect_error::bad_location, the problem
///     naming the Location.
///   - An https:// URL redirected to http:// ends the request as `rejected`,
///     redirect_error::insecure_redirect, unless allow_insecure.
///   - Credentials (Authorization, Cookie, Proxy-Authorization set by the
///     caller, and the URL's userinfo) go only to the origin (scheme, host,
///     port) of the first URL, unless `trusted`; a Host header the caller
///     set goes only there as well. A Location's own userinfo is used for
///     its target. The proxy (and its credentials) is chosen again for each
///     hop's URL, NO_PROXY included.
///   - A hop is a new request, not a retry: it takes no retry-budget token.
///     The policy applies to the whole chain: its overall deadline spans
///     every hop and every retry, and every attempt past the first of any
///     hop counts against max_attempts. A hop to another origin than the
///     first tells nothing to the request's gate, latency tracker or
///     concurrency limit (they describe the first dependency), and an
///     observed attempt limit (policy::observed) is replaced there by
///     policy::attempt_limit.
///   - A redirect past max_redirects ends the request as `rejected`,
///     redirect_error::too_many_redirects (its attempt's category
///     "too_many_redirects"), the problem naming the last target; a loop
///     ends the same way.
/// Each followed hop is recorded in exchange::redirects; the exchange is the
/// last hop's. A redirect's body is never streamed to a body sink: it is
/// read into memory (within client_options::body_limit) and dropped.
struct redirect_options {
  /// Follow redirects at all.
  bool follow = false;
  /// Hops followed at most (curl's --max-redirs); at most max_redirects_cap.
  /// Zero with `follow`: the first redirect ends as too_many_redirects.
  unsigned max_redirects = 10;
  /// Send the credentials to every origin (curl's --location-trusted).
  bool trusted = false;
  /// Follow an https:// URL's redirect to an http:// one.
  bool allow_insecure = false;

  static constexpr unsigned max_redirects_cap = 1000;
  /// The longest Location followed: the size of URI RFC 9110 §4.1 asks
  /// recipients to support.
  static constexpr std::size_t max_location_length = 8000;
};

/// One redirect followed.
struct redirect_hop {
  std::string method;   ///< of the request that was redirected
  std::string url;      ///< that request's URL (credentials redacted)
  unsigned status = 0;  ///< 301, 302, 303, 307 or 308
  std::string location; ///< the Location field as received
  std::string target;   ///< the URL it resolved to, requested next (credentials redacted)
  /// The address that answered (through a proxy: the proxy's).
  std::optional<boost::asio::ip::tcp::endpoint> address;
};

/// Why a redirect was not followed. Each ends the request as
/// stop_reason::rejected; the code is the outcome's last_error, and
/// exchange::problem says which Location or URL.
enum class redirect_error {
  too_many_redirects = 1, ///< one more than redirect_options::max_redirects (or a loop)
  bad_location,           ///< a Location that is not a URL the client would request
  insecure_redirect,      ///< from https:// to http:// without allow_insecure
};

/// The category of redirect_error codes ("coretry.http.redirect").
const boost::system::error_category& redirect_error_category() noexcept;
boost::system::error_code make_error_code(redirect_error e) noexcept;

} // namespace coretry::http

template <>
struct boost::system::is_error_code_enum<coretry::http::redirect_error> : std::true_type {};

#endif
