#ifndef CORETRY_HTTP_CLASSIFY_HPP
#define CORETRY_HTTP_CLASSIFY_HPP

#include <coretry/http/exchange.hpp>
#include <coretry/verdict.hpp>

#include <boost/beast/http/verb.hpp>

#include <functional>
#include <optional>
#include <regex>

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
///   parser-limit violations and malformed responses permanent.
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

/// A 5xx whose body matches `pattern` is permanent (for example a scraper's
/// 503 saying the target website returned HTTP 4xx: asking again gets the
/// same refusal).
classifier_extension permanent_5xx_when_body_matches(std::regex pattern);

} // namespace coretry::http

#endif
