#include <coretry/redis/url.hpp>

#include <coretry/net/authority.hpp>
#include <coretry/net/redact.hpp>

#include <boost/asio/ip/address.hpp>

#include <charconv>
#include <stdexcept>
#include <variant>

namespace coretry::redis {

namespace {

constexpr std::size_t max_url = 4096;

std::variant<endpoint, std::string> read(std::string_view url) {
  const auto fail = [&](std::string_view why) {
    return std::variant<endpoint, std::string>(std::string("bad Redis URL ") + net::quoted_url_without_userinfo(url) + ": " + std::string(why));
  };
  if (url.size() > max_url) return fail("longer than 4096 bytes");
  constexpr std::string_view plain = "redis://", tls = "rediss://";
  endpoint e;
  std::string_view rest;
  if (url.substr(0, plain.size()) == plain)
    rest = url.substr(plain.size());
  else if (url.substr(0, tls.size()) == tls) {
    rest = url.substr(tls.size());
    e.tls = true;
  } else
    return fail("the scheme must be redis:// or rediss:// (TLS)");
  if (rest.find_first_of("?#") != std::string_view::npos) return fail("a query or fragment is not allowed");
  for (char c : rest)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return fail("it contains a space or control character");
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
  const auto at = authority.rfind('@');
  if (at != std::string_view::npos) {
    const std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    const auto colon = userinfo.find(':');
    const std::string_view user = userinfo.substr(0, colon);
    const std::string_view pass = colon == std::string_view::npos ? std::string_view{} : userinfo.substr(colon + 1);
    auto u = net::percent_decoded(user);
    auto p = net::percent_decoded(pass);
    if (!u || !p) return fail("a bad percent escape in the userinfo");
    // USER@: the user's password comes from elsewhere (credentials.hpp).
    if (colon == std::string_view::npos) {
      if (u->empty()) return fail("an empty user name before '@'");
      if (auto why = credentials_problem(*u, "-")) return fail(*why);
      e.user = *u;
      u.reset();
    }
    if (u) {
      if (auto why = credentials_problem(*u, *p)) return fail(*why);
      if (!u->empty()) e.user = *u;
      e.password = *p;
    }
  }
  std::string_view host = authority, port;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return fail("an IPv6 address without its closing ']'");
    host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return fail("something other than :PORT after the IPv6 address");
      port = after.substr(1);
      if (port.empty()) return fail("an empty port");
    }
    boost::system::error_code ec;
    const auto a = boost::asio::ip::make_address_v6(std::string(host), ec);
    if (ec || host.find('%') != std::string_view::npos || a.scope_id() != 0) return fail("the host is not an IPv6 address");
  } else {
    const auto colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      host = authority.substr(0, colon);
      port = authority.substr(colon + 1);
      if (port.empty()) return fail("an empty port");
    }
    if (host.empty()) return fail("no host");
    if (!net::is_dns_name(host)) return fail("the host is not a DNS name or an IP address");
  }
  if (host.empty()) return fail("no host");
  e.host = std::string(host);
  if (!port.empty()) {
    const auto value = net::parse_port(port);
    if (!value) return fail("the port must be a number from 1 to 65535");
    e.port = *value;
  }
  if (!path.empty()) {
    unsigned value = 0;
    const auto r = std::from_chars(path.data(), path.data() + path.size(), value);
    if (r.ec != std::errc{} || r.ptr != path.data() + path.size() || value > 1'000'000)
      return fail("the database (after '/') must be a number from 0 to 1000000");
    e.db = value;
  }
  return e;
}

} // namespace

std::optional<std::string> credentials_problem(std::string_view user, std::string_view password) {
  if (password.empty()) return "the password is empty";
  if (password.size() > 512 || user.size() > 512) return "the user name or password is longer than 512 bytes";
  for (std::string_view part : {user, password})
    for (char c : part)
      if (c == '\0' || c == '\r' || c == '\n') return "the user name or password contains a control character";
  return std::nullopt;
}

std::optional<std::string> url_problem(std::string_view url) {
  auto r = read(url);
  if (auto* why = std::get_if<std::string>(&r)) return std::move(*why);
  return std::nullopt;
}

endpoint parse_url(std::string_view url) {
  auto r = read(url);
  if (auto* why = std::get_if<std::string>(&r)) throw std::invalid_argument(*why);
  return std::get<endpoint>(std::move(r));
}

} // namespace coretry::redis
