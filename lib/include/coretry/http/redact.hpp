#ifndef CORETRY_HTTP_REDACT_HPP
#define CORETRY_HTTP_REDACT_HPP

#include <string_view>

namespace coretry::http {

/// Whether a header field's value is a credential that must never appear in
/// events, errors or logs: Authorization, Proxy-Authorization, Cookie,
/// Set-Cookie, API keys, tokens and the like. Case-insensitive.
bool is_sensitive_header(std::string_view name) noexcept;

} // namespace coretry::http

#endif
