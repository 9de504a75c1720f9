#include <serving/listen_address.hpp>

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>

#include <stdexcept>
#include <string>

using coretry::serving::open_listener;
using coretry::serving::parse_listen_address;
using coretry::serving::url_host;
namespace asio = boost::asio;

namespace {
std::string refusal(const std::string& text) {
  try {
    (void)parse_listen_address(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}
} // namespace

TEST_CASE("parse_listen_address: IPv4 and bracketed IPv6") {
  const auto v4 = parse_listen_address("127.0.0.1:8080");
  CHECK(v4.address().to_string() == "127.0.0.1");
  CHECK(v4.port() == 8080);

  const auto v6 = parse_listen_address("[::1]:8080");
  CHECK(v6.address().is_v6());
  CHECK(v6.address().to_string() == "::1");
  CHECK(v6.port() == 8080);

  const auto any = parse_listen_address("[::]:0");
  CHECK(any.address().is_unspecified());
  CHECK(any.port() == 0);

  CHECK(parse_listen_address("0.0.0.0:65535").port() == 65535);
}

TEST_CASE("parse_listen_address: a bad port is named") {
  CHECK(refusal("127.0.0.1:65536") ==
        "listen address '127.0.0.1:65536' must be IP:PORT (IPv6 as [ADDRESS]:PORT); '65536' is not a port number "
        "(0 to 65535)");
  CHECK(refusal("127.0.0.1:80x").find("'80x' is not a port number") != std::string::npos);
  CHECK(refusal("127.0.0.1:").find("'' is not a port number") != std::string::npos);
  CHECK(refusal("[::1]:-1").find("'-1' is not a port number") != std::string::npos);
}

TEST_CASE("parse_listen_address: a bad host is named") {
  CHECK(refusal("127.0.0.1").find("it has no port") != std::string::npos);
  CHECK(refusal("").find("it has no port") != std::string::npos);
  CHECK(refusal("::1:8080").find("an IPv6 address needs brackets") != std::string::npos);
  CHECK(refusal("[127.0.0.1]:80").find("'127.0.0.1' is not an IP address") != std::string::npos);
  CHECK(refusal("localhost:80").find("'localhost' is not an IP address") != std::string::npos);
  CHECK(refusal(":80").find("'' is not an IP address") != std::string::npos);
  CHECK(refusal("[::1:80").find("an IPv6 address needs brackets") != std::string::npos);
}

TEST_CASE("parse_listen_address: hostile text is quoted harmlessly in the message") {
  CHECK(refusal("1.2.3.4:8\n0").find("'8\\x0a0' is not a port number") != std::string::npos);
}

TEST_CASE("url_host: brackets for IPv6, loopback for a wildcard") {
  CHECK(url_host(asio::ip::make_address("10.1.2.3")) == "10.1.2.3");
  CHECK(url_host(asio::ip::make_address("0.0.0.0")) == "127.0.0.1");
  CHECK(url_host(asio::ip::make_address("::1")) == "[::1]");
  CHECK(url_host(asio::ip::make_address("::")) == "[::1]");
  CHECK(url_host(asio::ip::make_address("fd00::2")) == "[fd00::2]");
}

TEST_CASE("open_listener: binds, listens and names the port it got") {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor{io};
  const std::string url = open_listener(acceptor, parse_listen_address("127.0.0.1:0"), "http");
  REQUIRE(acceptor.is_open());
  const unsigned short port = acceptor.local_endpoint().port();
  CHECK(port != 0);
  CHECK(url == "http://127.0.0.1:" + std::to_string(port));

  // The same port again cannot be bound while the first listener holds it.
  asio::ip::tcp::acceptor second{io};
  CHECK_THROWS_AS(open_listener(second, acceptor.local_endpoint(), "https"), boost::system::system_error);
}
