#ifndef CORETRY_HTTP_REDACT_HPP
#define CORETRY_HTTP_REDACT_HPP

#include <string>
#include <string_view>

namespace coretry::http {

/// Whether a header field's value is a credential that must never appear in
/// events, errors or logs: Authorization, Proxy-Authorization, Cookie,
/// Set-Cookie, API keys, tokens and the like. Case-insensitive.
bool is_sensitive_header(std::string_view name) noexcept;

/// The URL fit to show in a message or log: any user information becomes
/// "REDACTED", and so do the values of query parameters whose names suggest
/// a credential (key, token, secret, password, signature, session, ...).
/// Text that is no URL loses everything before an '@' and from a '?' or '#'.
std::string redact_url(std::string_view url);

} // namespace coretry::http

#endif
