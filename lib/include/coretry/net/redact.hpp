#ifndef CORETRY_NET_REDACT_HPP
#define CORETRY_NET_REDACT_HPP
/// @file
/// What must never be shown (credentials in header fields, query parameters
/// and URLs) and URLs made fit to show.

#include <string>
#include <string_view>

namespace coretry::net {

// The one list of credential names that events, errors, logs and the
// programs' output go by.

/// Whether a header field's value is a credential that must never appear in
/// events, errors or logs: its name contains key, token, secret, password,
/// auth, session, cookie, signature or credential, in any case
/// (Authorization, Cookie, Set-Cookie, X-Api-Key, Ocp-Apim-Subscription-Key,
/// X-Master-Key, x-functions-key, ...). Idempotency-Key is the one exception:
/// it names a request and grants nothing, so it stays visible. A name longer
/// than 256 characters counts as sensitive.
bool is_sensitive_header(std::string_view name) noexcept;

/// Whether a query parameter's value is a credential: its name contains one
/// of the words above, or pwd, pass, jwt or sig, in any case.
bool is_sensitive_query_parameter(std::string_view name) noexcept;

/// The URL fit to show in a message or log: any user information becomes
/// "REDACTED", and so do the values of query parameters for which
/// is_sensitive_query_parameter holds (names compared percent-decoded, so
/// `p%77d=` is `pwd=`). Text that is no URL loses everything before an '@'
/// and from a '?' or '#'.
std::string redact_url(std::string_view url);

/// `url` quoted for a message ('...'): everything between its scheme's
/// "://" and its last '@' replaced by "***" (a password may hold '/', '@' or
/// "://" unescaped, and be longer than what is shown), then cut to 200
/// bytes, control characters shown as '?'. For URLs of schemes that are not
/// http's (redis://), read by hand rather than by a URL grammar.
std::string quoted_url_without_userinfo(std::string_view url);

} // namespace coretry::net

#endif
