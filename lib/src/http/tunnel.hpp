#ifndef CORETRY_SRC_HTTP_TUNNEL_HPP
#define CORETRY_SRC_HTTP_TUNNEL_HPP

// A tunnel through an HTTP proxy: CONNECT host:port, and the proxy's answer
// read within bounds. Internal to coretry::http.

#include <coretry/http/exchange.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace coretry::http::detail {

/// The proxy a client's requests go through (client_options::proxy, read).
struct proxy_route {
  std::string host;
  std::string port;
  std::string authorization; ///< "Basic ...", empty without credentials
  std::string shown;         ///< the URL, credentials redacted
};

/// Asks the proxy on `socket` to open a tunnel to `host`:`port` and reads
/// its answer: at most `header_limit` bytes of header, each read looking for
/// cancellation first (the attempt's deadline bounds a proxy that never
/// answers). A 2xx leaves `socket` ready for the origin's TLS handshake.
/// Any other complete answer is proxy_error::refused with its status in
/// `x.proxy_status`; a malformed or oversized answer, or bytes after a 2xx,
/// proxy_error::bad_answer; the proxy closing first, end_of_stream.
boost::asio::awaitable<boost::system::error_code> open_tunnel(boost::asio::ip::tcp::socket& socket,
                                                              const proxy_route& proxy, const std::string& host,
                                                              const std::string& port, std::uint32_t header_limit,
                                                              exchange& x);

} // namespace coretry::http::detail

#endif
