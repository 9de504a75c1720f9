#include "tunnel.hpp"

#include "connect.hpp"
#include "response_reading.hpp"

#include <coretry/http/proxy.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <algorithm>

namespace coretry::http::detail {

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using boost::system::error_code;

asio::awaitable<error_code> open_tunnel(asio::ip::tcp::socket& socket, const proxy_route& proxy,
                                        const std::string& host, const std::string& port,
                                        std::uint32_t header_limit, exchange& x) {
  const auto cancel_state = co_await asio::this_coro::cancellation_state;
  // The authority form (RFC 9110 §9.3.6), an IPv6 address in brackets.
  std::string authority = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  authority.append(1, ':').append(port);
  std::string request = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n";
  if (!proxy.authorization.empty()) request += "Proxy-Authorization: " + proxy.authorization + "\r\n";
  request += "\r\n";
  if (cancellation_requested(cancel_state)) co_return asio::error::operation_aborted;
  auto [write_ec, written] = co_await asio::async_write(socket, asio::buffer(request), asio::as_tuple(asio::use_awaitable));
  if (write_ec) co_return write_ec;

  // The answer's header alone: a 2xx to CONNECT has no body (the tunnel
  // follows), and any other answer ends with the connection.
  beast_http::response_parser<beast_http::empty_body> parser;
  parser.header_limit(header_limit);
  parser.skip(true);
  boost::beast::flat_buffer buffer(header_limit);
  for (;;) {
    if (buffer.size() != 0) {
      if (parse_buffered(buffer, parser)) co_return proxy_error::bad_answer;
      if (parser.is_done()) break;
      // Full, and the parser took nothing of it: a header over the limit.
      if (buffer.size() == buffer.max_size()) co_return proxy_error::bad_answer;
    }
    if (cancellation_requested(cancel_state)) co_return asio::error::operation_aborted;
    const std::size_t room = buffer.max_size() - buffer.size();
    if (room == 0) co_return proxy_error::bad_answer;
    auto [read_ec, n] = co_await socket.async_read_some(buffer.prepare(std::min<std::size_t>(room, 4096)),
                                                        asio::as_tuple(asio::use_awaitable));
    buffer.commit(n);
    if (read_ec == asio::error::eof) co_return beast_http::error::end_of_stream;
    if (read_ec) co_return read_ec;
  }
  const unsigned status = parser.get().result_int();
  if (status < 200 || status > 299) {
    x.proxy_status = status;
    co_return proxy_error::refused;
  }
  // The client speaks first in TLS: anything the proxy sent beyond its
  // answer is not the origin's.
  if (buffer.size() != 0) co_return proxy_error::bad_answer;
  co_return error_code{};
}

} // namespace coretry::http::detail
