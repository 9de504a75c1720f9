#include "serving/listen_address.hpp"

#include <common/port.hpp>
#include <common/quoting.hpp>

#include <stdexcept>

namespace coretry::serving {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using coretry::common::quoted;

tcp::endpoint parse_listen_address(std::string_view text) {
  const std::string usage = "listen address " + quoted(text) + " must be IP:PORT (IPv6 as [ADDRESS]:PORT)";
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) throw std::invalid_argument(usage + "; it has no port");
  std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) host = host.substr(1, host.size() - 2);
  else if (host.find(':') != std::string_view::npos)
    throw std::invalid_argument(usage + "; an IPv6 address needs brackets");

  boost::system::error_code error;
  const asio::ip::address address = asio::ip::make_address(std::string{host}, error);
  if (error || bracketed != address.is_v6())
    throw std::invalid_argument(usage + "; " + quoted(host) + " is not an IP address");

  const auto port = coretry::common::parse_port(port_text, coretry::common::port_zero::picks_free);
  if (!port) throw std::invalid_argument(usage + "; " + quoted(port_text) + " is not a port number (0 to 65535)");
  return {address, *port};
}

std::string url_host(const asio::ip::address& address) {
  if (address.is_v4()) return address.is_unspecified() ? "127.0.0.1" : address.to_string();
  return address.is_unspecified() ? "[::1]" : "[" + address.to_string() + "]";
}

std::string open_listener(tcp::acceptor& acceptor, const tcp::endpoint& endpoint, std::string_view scheme) {
  acceptor.open(endpoint.protocol());
  acceptor.set_option(tcp::acceptor::reuse_address(true));
  acceptor.bind(endpoint);
  acceptor.listen();
  return std::string{scheme} + "://" + url_host(endpoint.address()) + ":" +
         std::to_string(acceptor.local_endpoint().port());
}

} // namespace coretry::serving
