#include <coretry/http/addresses.hpp>
#include <coretry/net/authority.hpp>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace coretry::http {

namespace {

constexpr std::size_t max_entry_length = 4096;
constexpr std::size_t max_addresses = 64;

[[noreturn]] void refuse(std::string_view text, const std::string& problem) {
  // The entry is quoted within bounds, control characters shown as '?'.
  std::string shown(text.substr(0, 200));
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  throw std::invalid_argument("resolve entry \"" + shown + (text.size() > 200 ? "...\"" : "\"") +
                              ": " + problem + " (expected HOST:PORT:ADDR[,ADDR...], IPv6 written [::1])");
}

bool host_character(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}

} // namespace

resolve_entry parse_resolve_entry(std::string_view text) {
  if (text.size() > max_entry_length) refuse(text, "longer than " + std::to_string(max_entry_length) + " characters");
  resolve_entry entry;
  const auto first = text.find(':');
  if (first == std::string_view::npos) refuse(text, "no port");
  const std::string_view host = text.substr(0, first);
  if (host.empty()) refuse(text, "no host");
  if (host.size() > 253) refuse(text, "the host is longer than 253 characters");
  if (!std::all_of(host.begin(), host.end(), host_character))
    refuse(text, "the host is not a name (letters, digits, '-', '.', '_')");
  entry.host.reserve(host.size());
  for (char c : host) entry.host.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));

  const auto second = text.find(':', first + 1);
  if (second == std::string_view::npos) refuse(text, "no address after the port");
  const auto port = net::parse_port(text.substr(first + 1, second - first - 1));
  if (!port) refuse(text, "the port is not a number from 1 to 65535");
  entry.port = *port;

  std::string_view rest = text.substr(second + 1);
  if (rest.empty()) refuse(text, "no address");
  while (true) {
    const auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    if (item.empty()) refuse(text, "an empty address");
    if (item.front() == '[') {
      if (item.size() < 3 || item.back() != ']') refuse(text, "an IPv6 address without its closing ']'");
      item = item.substr(1, item.size() - 2);
      boost::system::error_code ec;
      const auto v6 = boost::asio::ip::make_address_v6(std::string(item), ec);
      if (ec) refuse(text, "\"" + std::string(item) + "\" is not an IPv6 address");
      entry.addresses.emplace_back(v6);
    } else {
      boost::system::error_code ec;
      const auto v4 = boost::asio::ip::make_address_v4(std::string(item), ec);
      if (ec) {
        if (item.find(':') != std::string_view::npos) refuse(text, "an IPv6 address must be written in brackets");
        refuse(text, "\"" + std::string(item.substr(0, 64)) + "\" is not an IPv4 address");
      }
      entry.addresses.emplace_back(v4);
    }
    if (entry.addresses.size() > max_addresses) refuse(text, "more than " + std::to_string(max_addresses) + " addresses");
    if (std::find(entry.addresses.begin(), entry.addresses.end() - 1, entry.addresses.back()) !=
        entry.addresses.end() - 1)
      refuse(text, "the address " + entry.addresses.back().to_string() + " is given twice");
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return entry;
}

std::string to_string(const boost::asio::ip::tcp::endpoint& at) {
  const std::string address = at.address().to_string();
  const std::string port = std::to_string(at.port());
  return at.address().is_v6() ? "[" + address + "]:" + port : address + ":" + port;
}

} // namespace coretry::http
