#include "test_support.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <doctest/doctest.h>

#include <openssl/ssl.h>

namespace fault_tests {

test_client::test_client(unsigned short port, std::optional<tls_client_options> tls)
    : port_(port), tls_(std::move(tls)) {
  if (tls_) {
    tls_context_.emplace(asio::ssl::context::tls_client);
    tls_context_->add_certificate_authority(asio::buffer(tls_->ca_pem));
    tls_context_->set_verify_mode(asio::ssl::verify_peer);
  }
}

// Runs one asynchronous operation to completion on the client's own
// io_context, bounded by the stream's timeout.
template <class Operation> error_code test_client::run(Operation operation) {
  error_code result = asio::error::would_block;
  const auto on_done = [&result](error_code error, auto&&...) { result = error; };
  if (secure_) {
    beast::get_lowest_layer(*secure_).expires_after(timeout);
    operation(*secure_, on_done);
  } else {
    plain_->expires_after(timeout);
    operation(*plain_, on_done);
  }
  io_.restart();
  io_.run();
  return result;
}

error_code test_client::connect() {
  close();
  const asio::ip::tcp::endpoint endpoint{asio::ip::make_address("127.0.0.1"), port_};
  if (tls_) {
    secure_.emplace(io_, *tls_context_);
    // OpenSSL itself checks the name, so that a mismatch has its own verify result.
    SSL_set1_host(secure_->native_handle(), tls_->host.c_str());
    SSL_set_tlsext_host_name(secure_->native_handle(), tls_->host.c_str());
  } else {
    plain_.emplace(io_);
  }
  if (const error_code error = run([&](auto& stream, auto handler) {
        beast::get_lowest_layer(stream).async_connect(endpoint, handler);
      }))
    return error;
  if (!tls_) return {};
  // run() instantiates the operation for both stream kinds; only TLS handshakes.
  return run([](auto& stream, auto handler) {
    if constexpr (requires { stream.async_handshake(asio::ssl::stream_base::client, handler); })
      stream.async_handshake(asio::ssl::stream_base::client, handler);
  });
}

long test_client::verify_result() { return secure_ ? SSL_get_verify_result(secure_->native_handle()) : 0; }

error_code test_client::write(const http_request& request) {
  return run([&](auto& stream, auto handler) { http::async_write(stream, request, handler); });
}

error_code test_client::write_raw(std::string_view bytes) {
  return run([&](auto& stream, auto handler) { asio::async_write(stream, asio::buffer(bytes), handler); });
}

error_code test_client::read(http_response& response) {
  return run([&](auto& stream, auto handler) { http::async_read(stream, buffer_, response, handler); });
}

error_code test_client::read_header(http::response_parser<http::string_body>& parser) {
  return run([&](auto& stream, auto handler) { http::async_read_header(stream, buffer_, parser, handler); });
}

error_code test_client::read_rest(http::response_parser<http::string_body>& parser) {
  return run([&](auto& stream, auto handler) { http::async_read(stream, buffer_, parser, handler); });
}

error_code test_client::read_raw(std::string& received) {
  received.assign(static_cast<const char*>(buffer_.data().data()), buffer_.size());
  buffer_.consume(buffer_.size());
  return run([&](auto& stream, auto handler) { asio::async_read(stream, asio::dynamic_buffer(received), handler); });
}

reply test_client::exchange(http_request request) {
  const bool connected = secure_ ? beast::get_lowest_layer(*secure_).socket().is_open()
                                 : plain_ && plain_->socket().is_open();
  reply result;
  if (!connected) {
    if ((result.error = connect())) return result;
  }
  const auto start = std::chrono::steady_clock::now();
  if (!(result.error = write(request))) result.error = read(result.response);
  result.elapsed = std::chrono::steady_clock::now() - start;
  return result;
}

reply test_client::get(std::string_view target,
                       std::initializer_list<std::pair<std::string_view, std::string_view>> fields) {
  http_request request = make_request(http::verb::get, target);
  for (const auto& [name, value] : fields) request.set(name, value);
  return exchange(std::move(request));
}

void test_client::close() {
  error_code ignored;
  if (secure_) beast::get_lowest_layer(*secure_).socket().close(ignored);
  if (plain_) plain_->socket().close(ignored);
  secure_.reset();
  plain_.reset();
  buffer_.clear();
}

http_request make_request(http::verb method, std::string_view target, std::string body) {
  http_request request{method, target, 11};
  request.set(http::field::host, "127.0.0.1");
  if (!body.empty() || method == http::verb::post || method == http::verb::put) {
    request.body() = std::move(body);
    request.prepare_payload();
  }
  return request;
}

} // namespace fault_tests
