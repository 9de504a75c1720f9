#ifndef CORETRY_SERVING_LISTEN_ADDRESS_HPP
#define CORETRY_SERVING_LISTEN_ADDRESS_HPP

// Where a server listens, shared by the fault server and the bookstore: the
// IP:PORT text of a --listen option, the acceptor opened on it, and the URL a
// client uses to reach it.

#include <boost/asio/ip/tcp.hpp>

#include <string>
#include <string_view>

namespace coretry::serving {

/// Parses "IP:PORT": an IPv4 address, or an IPv6 address in brackets
/// ("[::1]:8080"); port 0 asks for any free port. Throws
/// std::invalid_argument whose message quotes the text and names what is
/// wrong (no port, an unbracketed IPv6 address, a host that is no IP
/// address, a port that is not 0 to 65535).
boost::asio::ip::tcp::endpoint parse_listen_address(std::string_view text);

/// The host part of a URL that reaches `address`: IPv6 in brackets, and a
/// wildcard address (0.0.0.0, ::) as the loopback of its family, on which
/// the server accepts too.
std::string url_host(const boost::asio::ip::address& address);

/// Opens `acceptor` on `endpoint` (reusing a lingering address), binds and
/// listens. Returns the base URL clients use: "SCHEME://HOST:PORT", with the
/// port actually bound (the chosen one for port 0). Throws
/// boost::system::system_error when the address cannot be bound.
std::string open_listener(boost::asio::ip::tcp::acceptor& acceptor, const boost::asio::ip::tcp::endpoint& endpoint,
                          std::string_view scheme);

} // namespace coretry::serving

#endif
