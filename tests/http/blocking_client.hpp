#ifndef CORETRY_TESTS_HTTP_BLOCKING_CLIENT_HPP
#define CORETRY_TESTS_HTTP_BLOCKING_CLIENT_HPP

// The HTTP tests' client: one request at a time, run to completion on an
// io_context of the test's own before send() returns.

#include <coretry/http/client.hpp>

#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <exception>
#include <optional>
#include <string>
#include <utility>

namespace coretry_tests {

/// A coretry::http::client on an io_context that each send() runs.
struct blocking_client {
  explicit blocking_client(coretry::http::client_options options = {})
      : client(io.get_executor(), std::move(options)) {}

  /// Sends `method` with `body` to `url` and runs the io_context until it
  /// is done; fails the test if the operation ended in an exception or its
  /// handler never ran.
  coretry::http::result send(boost::beast::http::verb method, const std::string& url,
                             const coretry::http::request_options& options = {}, std::string body = {}) {
    coretry::http::request req(method, "", 11);
    req.body() = std::move(body);
    std::optional<coretry::http::result> result;
    client.async_send(url, std::move(req), options, [&](std::exception_ptr e, coretry::http::result r) {
      REQUIRE_FALSE(e);
      result = std::move(r);
    });
    io.run();
    io.restart();
    REQUIRE(result);
    return std::move(*result);
  }

  boost::asio::io_context io;
  coretry::http::client client;
};

} // namespace coretry_tests

#endif
