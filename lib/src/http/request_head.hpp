#ifndef CORETRY_SRC_HTTP_REQUEST_HEAD_HPP
#define CORETRY_SRC_HTTP_REQUEST_HEAD_HPP

// The bytes of a request as the client sends it: the request line, Host
// first when the request has none, the request's own fields, User-Agent when
// it has none, and the body's framing. The fields the client adds are
// written, not inserted into the request: no block per field, and the text
// goes into the connection's own buffer, which keeps its room for the next
// request. Internal to coretry::http.

#include <coretry/http/exchange.hpp>

#include <boost/asio/buffer.hpp>

#include <array>
#include <string>
#include <string_view>

namespace coretry::http::detail {

/// What the client adds to a request that lacks it, and the target it uses
/// when the request names none.
struct added_fields {
  std::string_view target;     ///< used when the request's target is empty
  std::string_view host;       ///< the Host value; empty: none added
  std::string_view user_agent; ///< the User-Agent value; empty: none added
};

/// Replaces `out` with the head of `req` (through the blank line, and the
/// first chunk's size line when the body is sent chunked). The request's
/// fields were checked (request_problem): nothing here can split a line.
void write_request_head(std::string& out, const request& req, const added_fields& added);

/// The request as buffers: `head` (from write_request_head), the body, and
/// the end of a chunked body.
std::array<boost::asio::const_buffer, 3> request_buffers(const std::string& head, const request& req);

} // namespace coretry::http::detail

#endif
