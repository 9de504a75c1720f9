#ifndef CORETRY_HTTP_RETRY_AFTER_HPP
#define CORETRY_HTTP_RETRY_AFTER_HPP

#include <chrono>
#include <optional>
#include <string_view>

// Parsers for the HTTP Retry-After field (RFC 9110 §10.2.3) and HTTP-date
// (RFC 9110 §5.6.7). Pure functions: no I/O, no clock reads, no locale, so
// results depend only on the arguments.
namespace coretry::http {

/// Parses an HTTP-date in any of its three forms, all case-sensitive:
///   IMF-fixdate  `Sun, 06 Nov 1994 08:49:37 GMT`  (the form servers must send)
///   RFC 850      `Sunday, 06-Nov-94 08:49:37 GMT` (obsolete, still accepted)
///   asctime      `Sun Nov  6 08:49:37 1994`       (obsolete; day is ` 6` or `06`)
/// Field widths are exact and only ASCII digits count. Leading and trailing
/// SP/HTAB are ignored. Returns empty for anything else.
///
/// Where the RFC leaves room:
/// - The weekday must be a valid name of the right form, but is not checked
///   against the date: the RFC does not require it, and the numeric fields
///   are what the sender meant.
/// - Second 60 (a leap second) is accepted and, as POSIX time has no leap
///   seconds, counts as the following second (23:59:60 is 00:00:00 next day).
/// - Any four-digit year 0000-9999 is accepted (RFC 9110: `year = 4DIGIT`),
///   on the proleptic Gregorian calendar. A date system_clock::time_point
///   cannot hold saturates instead of wrapping: later than its range
///   (2262-04-11 with a nanosecond clock) gives time_point::max(), "far
///   future"; earlier than its range (1677-09-21) gives time_point::min(),
///   "long past".
/// - Without a reference time, an RFC 850 two-digit year YY means 20YY for
///   00-69 and 19YY for 70-99 (the POSIX strptime rule). parse_retry_after
///   applies the RFC's rule relative to its `now` instead.
std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view value);

/// Parses a Retry-After value: `delay-seconds` (1*DIGIT) or an HTTP-date,
/// with leading and trailing SP/HTAB ignored. Returns how long to wait from
/// `now`, never negative, or empty if the value is invalid (signs, fractions,
/// exponents, inner spaces, non-ASCII digits, bad dates, empty).
///
/// - Seconds too large for std::chrono::nanoseconds saturate to
///   nanoseconds::max() instead of wrapping, so a huge value reads as "too
///   long" rather than as a short or negative delay.
/// - A date gives `date - now`, zero if the date is not in the future (however
///   long past, even before the clock's range), and nanoseconds::max() if the
///   difference does not fit (a date too far ahead for any deadline).
/// - An RFC 850 two-digit year resolves to the year in [Y - 49, Y + 50], with
///   Y the year of `now`, that ends in those digits: a year more than 50 years
///   ahead means the most recent past one (RFC 9110 §5.6.7). Compared by year.
std::optional<std::chrono::nanoseconds> parse_retry_after(std::string_view value,
                                                          std::chrono::system_clock::time_point now);

} // namespace coretry::http

#endif
