// The examples' in-process HTTP/1.1 server: it listens on 127.0.0.1 on a port
// the system picks and hands each request to the example's own handler, which
// writes the response itself. It is the smallest server that lets an example
// run its whole story in one process; it has none of the limits a server
// facing real clients needs (see apps/serving for those).

#ifndef CORETRY_EXAMPLES_LOOPBACK_SERVER_HPP
#define CORETRY_EXAMPLES_LOOPBACK_SERVER_HPP

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include <functional>
#include <memory>
#include <string>

namespace examples {

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using asio::ip::tcp;

/// Answers one request on `socket`; returns whether the connection may carry
/// another request.
using request_handler =
    std::function<asio::awaitable<bool>(tcp::socket& socket, const beast_http::request<beast_http::string_body>& req)>;

class loopback_server {
public:
  loopback_server(asio::io_context& io, request_handler handler)
      : acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        handler_(std::make_shared<request_handler>(std::move(handler))) {
    asio::co_spawn(io, accept_loop(), asio::detached);
  }

  /// "http://127.0.0.1:PORT" followed by `path`.
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()) + path;
  }

  /// Stops accepting; connections already open end with their client.
  void stop() { acceptor_.close(); }

private:
  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
      if (ec) continue;
      asio::co_spawn(acceptor_.get_executor(), serve(std::move(socket), handler_), asio::detached);
    }
  }

  static asio::awaitable<void> serve(tcp::socket socket, std::shared_ptr<request_handler> handler) {
    boost::beast::flat_buffer buffer;
    for (;;) {
      beast_http::request<beast_http::string_body> req;
      auto [ec, n] = co_await beast_http::async_read(socket, buffer, req, asio::as_tuple(asio::use_awaitable));
      (void)n;
      if (ec) co_return; // the client closed, or sent something that is not HTTP
      if (!co_await (*handler)(socket, req) || !req.keep_alive()) co_return;
    }
  }

  tcp::acceptor acceptor_;
  std::shared_ptr<request_handler> handler_;
};

} // namespace examples

#endif
