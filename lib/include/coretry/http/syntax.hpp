#ifndef CORETRY_HTTP_SYNTAX_HPP
#define CORETRY_HTTP_SYNTAX_HPP

#include <coretry/net/authority.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace coretry::http {

/// Whether `text` is an HTTP token (RFC 9110 §5.6.2): one or more letters,
/// digits or the fifteen punctuation characters a token allows (among them
/// '!', '#', '-', '.', '_' and '~'). Method and field names must be.
bool is_token(std::string_view text);

/// Whether `text` may be a field value as the client sends it: no CR, LF,
/// NUL or other control character (a tab is allowed), no DEL.
bool is_field_value(std::string_view text);

/// net::percent_decoded, under the name the HTTP client always had.
using net::percent_decoded;

} // namespace coretry::http

#endif
