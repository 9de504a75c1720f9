#ifndef CORETRY_HTTP_REDACT_HPP
#define CORETRY_HTTP_REDACT_HPP
/// @file
/// The redaction of credentials (coretry/net/redact.hpp) under the HTTP
/// client's names.

#include <coretry/net/redact.hpp>

namespace coretry::http {

using net::is_sensitive_header;
using net::is_sensitive_query_parameter;
using net::redact_url;

} // namespace coretry::http

#endif
