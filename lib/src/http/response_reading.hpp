#ifndef CORETRY_SRC_HTTP_RESPONSE_READING_HPP
#define CORETRY_SRC_HTTP_RESPONSE_READING_HPP

// The sans-I/O steps of reading a response, shared by the client's read loop
// and the response-reading fuzz target: what the bounded read buffer holds
// goes to the parser, a full buffer is a named error, interim responses are
// counted against their bound.

#include <coretry/http/client_error.hpp>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>

namespace coretry::http::detail {

/// The most one read may bring into the connection's buffer; 0 when the
/// buffer is at its maximum size (then see full_buffer_error).
inline std::size_t next_read_size(const boost::beast::flat_buffer& buffer) {
  return boost::beast::read_size(buffer, 65536);
}

/// Feeds what `buffer` holds to `parser` (a header first, then as much body
/// as there is) and consumes what the parser used. need_more is no error.
template <class Parser>
boost::system::error_code parse_buffered(boost::beast::flat_buffer& buffer, Parser& parser) {
  while (buffer.size() != 0 && !parser.is_done()) {
    boost::system::error_code ec;
    const std::size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == boost::beast::http::error::need_more) break;
    if (ec) return ec;
    if (used == 0) break;
  }
  return {};
}

/// The error when the buffer is full and the parser still wants more: the
/// header is bounded by the parser's own limit, so after it this is a
/// chunk-size line, a chunk extension or the trailers.
template <class Parser>
boost::system::error_code full_buffer_error(const Parser& parser) {
  return parser.is_header_done() ? boost::system::error_code(response_error::line_too_long)
                                 : boost::system::error_code(boost::beast::http::error::header_limit);
}

/// A 1xx other than 101 (Switching Protocols) comes before the final
/// response (RFC 9110 §15.2).
inline bool is_interim(unsigned status) { return status >= 100 && status < 200 && status != 101; }

} // namespace coretry::http::detail

#endif
