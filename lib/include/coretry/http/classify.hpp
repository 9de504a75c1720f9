#ifndef CORETRY_HTTP_CLASSIFY_HPP
#define CORETRY_HTTP_CLASSIFY_HPP

#include <coretry/http/exchange.hpp>
#include <coretry/verdict.hpp>

#include <boost/beast/http/verb.hpp>

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace coretry::http {

/// RFC 9110 §9.2.2: GET, HEAD, OPTIONS, TRACE, PUT and DELETE are idempotent.
bool is_idempotent(boost::beast::http::verb method) noexcept;

/// The default client policy table:
/// - 2xx success (unless the exchange carries a validation problem: permanent);
/// - 408, 429, 500, 502, 503, 504 transient; 429 and 503 (and a 413 that
///   carries a valid Retry-After) with the server's delay;
/// - other statuses permanent;
/// - transport failures transient, with `never_sent` when the attempt ended
///   before any byte of the request left (DNS, refused, TLS handshake, a
///   deadline before writing); TLS certificate verification failures,
///   parser-limit violations and malformed responses permanent;
/// - a server's refusal of the client certificate (or of its absence)
///   permanent ("tls_client_certificate");
/// - a proxy's refusal to open a tunnel (proxy_error): 502, 503 and 504
///   transient and `never_sent` whatever the method (the request never
///   reached the origin: "proxy_503"), 407 permanent ("proxy_407"), any
///   other status and a malformed or oversized answer permanent. Through a
///   proxy, the answer to an http:// request (absolute form) is the origin's
///   as far as this table goes: the proxy may have forwarded it.
/// `ec` is the attempt's own error (attempt_error::timed_out on a deadline).
verdict classify_exchange(const boost::system::error_code& ec, const exchange& x);

/// The server delay an exchange asks for (Retry-After on 429, 503 or 413), an
/// HTTP-date measured against the response's Date header when present (the
/// server's own clock, so client clock skew cancels out), else against the
/// local time the response arrived. Invalid values give none.
std::optional<duration> server_delay(const exchange& x);

/// A classifier extension: decides an exchange, or defers (nullopt) to the
/// next extension and finally to classify_exchange.
using classifier_extension =
    std::function<std::optional<verdict>(const boost::system::error_code&, const exchange&)>;

/// A 429 whose `header` is exactly `value` is permanent (for example
/// x-api-remaining-credits: 0 means out of credits, not too fast). A missing
/// header is not `value`: it falls through to the default rule.
classifier_extension permanent_429_when_header(std::string header, std::string value);

/// Whether letters match their other case in permanent_5xx_when_body_matches.
enum class letter_case { sensitive, insensitive };

/// A 5xx whose body contains a match of `pattern` is permanent (for example a
/// scraper's 503 saying the target website returned HTTP 4xx: asking again
/// gets the same refusal).
///
/// The body is the server's to choose, so the search is bounded whatever it
/// holds: Boost.Regex's non-recursive matcher (its stack lives on the heap,
/// in a bounded number of blocks) with its own limit on the work one search
/// may do. A search that hits either limit is not a match: the default rule
/// decides. `pattern` uses Perl/ECMAScript syntax, with `.` not matching a
/// line break. Throws std::invalid_argument naming the problem for an
/// invalid or empty pattern.
classifier_extension permanent_5xx_when_body_matches(std::string_view pattern,
                                                     letter_case cases = letter_case::sensitive);

/// A 5xx whose body `matches` (a predicate the caller supplies, for example
/// another regular-expression engine) is permanent, as above. `matches` sees
/// the body exactly as received and must not throw; it is called for 5xx
/// responses only. Throws std::invalid_argument if `matches` is empty.
classifier_extension permanent_5xx_when_body(std::function<bool(std::string_view body)> matches);

} // namespace coretry::http

#endif
