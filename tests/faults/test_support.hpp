#ifndef CORETRY_TESTS_FAULTS_TEST_SUPPORT_HPP
#define CORETRY_TESTS_FAULTS_TEST_SUPPORT_HPP

#include "faults/fault_server.hpp"

#include <eventually.hpp>
#include <server_thread.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <chrono>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace fault_tests {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
using namespace std::chrono_literals;

using http_response = http::response<http::string_body>;
using http_request = http::request<http::string_body>;
using coretry::test::eventually;
using coretry::test::server_thread;

struct tls_client_options {
  std::string ca_pem; ///< The only CA trusted.
  std::string host = "localhost"; ///< Name the server certificate must match.
};

/// What one request-response exchange produced.
struct reply {
  error_code error; ///< From writing the request or reading the response.
  http_response response;
  std::chrono::steady_clock::duration elapsed{}; ///< From sending to the end of the response.
};

/// A blocking HTTP/1.1 client for one connection; every operation gives up
/// after `timeout`, reporting beast::error::timeout.
class test_client {
public:
  explicit test_client(unsigned short port, std::optional<tls_client_options> tls = std::nullopt);

  std::chrono::milliseconds timeout = 3s;

  /// Connects, and with TLS also handshakes (verifying the server).
  error_code connect();
  /// With TLS, OpenSSL's verdict on the server certificate (X509_V_OK or an X509_V_ERR_*).
  long verify_result();

  error_code write(const http_request& request);
  error_code write_raw(std::string_view bytes);
  error_code read(http_response& response);
  error_code read_header(http::response_parser<http::string_body>& parser);
  error_code read_rest(http::response_parser<http::string_body>& parser);
  /// Reads whatever arrives until the peer closes, an error, or the timeout.
  error_code read_raw(std::string& received);

  /// Sends `request` (connecting first if need be) and reads the response.
  reply exchange(http_request request);
  reply get(std::string_view target, std::initializer_list<std::pair<std::string_view, std::string_view>> fields = {});

  void close();

private:
  template <class Operation> error_code run(Operation operation);

  asio::io_context io_;
  unsigned short port_;
  std::optional<asio::ssl::context> tls_context_;
  std::optional<tls_client_options> tls_;
  std::optional<beast::tcp_stream> plain_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure_;
  beast::flat_buffer buffer_;
};

/// What most cases start from: a fault server with the default options and
/// a client for it (connecting on its first request).
struct server_and_client {
  server_thread server;
  test_client client{server->port()};
};

http_request make_request(http::verb method, std::string_view target, std::string body = {});

} // namespace fault_tests

#endif
