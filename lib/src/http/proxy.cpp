// Proxy URLs, NO_PROXY lists and the environment variables that name them.
#include <coretry/http/proxy.hpp>

#include <coretry/http/redact.hpp>
#include <coretry/http/url.hpp>

#include "prepare.hpp"
#include "text_reading.hpp"

#include <boost/asio/ip/address.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>
#include <stdexcept>

namespace coretry::http {

namespace {

std::optional<std::string> read_proxy_url(std::string_view url, proxy_parts& out) {
  std::string full;
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) {
    full = "http://";
    full += url;
  } else {
    std::string scheme{url.substr(0, scheme_end)};
    std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                   [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
    if (scheme == "https")
      return "https:// proxies (TLS to the proxy itself) are not supported; give the proxy as http://HOST:PORT "
             "(https:// origins still go through it with TLS end to end): " + redact_url(url);
    if (scheme != "http")
      return "proxy scheme must be http, not '" + redact_url(scheme) + "': " + redact_url(url);
    full = url;
  }
  if (auto problem = url_problem(full)) return "proxy " + *problem;
  const url_parts parts = parse_url(full);
  const std::string_view after_scheme = std::string_view{full}.substr(7);
  const auto path = after_scheme.find_first_of("/?#");
  if (path != std::string_view::npos && after_scheme.substr(path) != "/")
    return "a proxy URL names a host and a port only, without a path, query or fragment: " + redact_url(url);
  out.host = parts.host;
  out.port = parts.explicit_port ? parts.port : 1080;
  out.authorization = parts.user ? detail::basic_credentials(*parts.user, parts.password) : std::string{};
  out.shown = redact_url(full);
  return std::nullopt;
}

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

bool equal_without_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
           return lower(x) == lower(y);
         });
}

/// Whether `host` is an address inside `network` ("10.0.0.0/8").
bool in_network(const boost::asio::ip::address& host, std::string_view network) {
  const auto slash = network.find('/');
  boost::system::error_code ec;
  const auto base = boost::asio::ip::make_address(std::string{network.substr(0, slash)}, ec);
  if (ec || base.is_v4() != host.is_v4()) return false;
  const unsigned width = host.is_v4() ? 32 : 128;
  unsigned bits = width;
  if (slash != std::string_view::npos) {
    const std::string_view text = network.substr(slash + 1);
    const auto [end, problem] = std::from_chars(text.data(), text.data() + text.size(), bits);
    if (problem != std::errc{} || end != text.data() + text.size() || bits > width) return false;
  }
  const auto bytes_of = [](const boost::asio::ip::address& a) {
    std::array<unsigned char, 16> bytes{};
    if (a.is_v4()) {
      const auto v4 = a.to_v4().to_bytes();
      std::copy(v4.begin(), v4.end(), bytes.begin());
    } else {
      bytes = a.to_v6().to_bytes();
    }
    return bytes;
  };
  const auto h = bytes_of(host);
  const auto b = bytes_of(base);
  for (unsigned i = 0; i < bits; ++i) {
    const unsigned mask = 0x80u >> (i % 8);
    if ((h[i / 8] & mask) != (b[i / 8] & mask)) return false;
  }
  return true;
}

} // namespace

proxy_parts parse_proxy_url(std::string_view url) { return detail::read_or_throw<proxy_parts>(url, read_proxy_url); }

std::optional<std::string> proxy_url_problem(std::string_view url) {
  return detail::reading_problem<proxy_parts>(url, read_proxy_url);
}

bool bypasses_proxy(std::string_view no_proxy, std::string_view host) {
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(std::string{host}, ec);
  const bool is_address = !ec;
  while (!no_proxy.empty()) {
    const auto comma = no_proxy.find(',');
    std::string_view entry = trimmed(no_proxy.substr(0, comma));
    no_proxy.remove_prefix(comma == std::string_view::npos ? no_proxy.size() : comma + 1);
    if (entry.empty()) continue;
    if (entry == "*") return true;
    if (is_address) {
      if (entry.front() == '[') { // "[::1]" as a host is written in a URL
        const auto close = entry.find(']');
        if (close == std::string_view::npos) continue;
        entry = entry.substr(1, close - 1);
      }
      if (in_network(address, entry)) return true;
      continue;
    }
    if (entry.front() == '.') entry.remove_prefix(1);
    if (!entry.empty() && entry.back() == '.') entry.remove_suffix(1);
    if (entry.empty()) continue;
    if (equal_without_case(host, entry)) return true;
    if (host.size() > entry.size() && host[host.size() - entry.size() - 1] == '.' &&
        equal_without_case(host.substr(host.size() - entry.size()), entry))
      return true;
  }
  return false;
}

proxy_environment proxy_from_environment(bool tls_origin, const std::function<const char*(const char*)>& lookup) {
  const auto get = [&lookup](const char* name) -> const char* { return lookup ? lookup(name) : std::getenv(name); };
  proxy_environment env;
  // https_proxy, HTTPS_PROXY; http_proxy only (HTTP_PROXY is what a CGI
  // program receives from a request's Proxy: field); then all_proxy, ALL_PROXY.
  const char* const https_names[] = {"https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"};
  const char* const http_names[] = {"http_proxy", "all_proxy", "ALL_PROXY"};
  const auto try_names = [&](const auto& names) {
    for (const char* name : names)
      if (const char* value = get(name)) {
        env.proxy = value;
        env.proxy_variable = name;
        return;
      }
  };
  if (tls_origin) try_names(https_names);
  else try_names(http_names);
  for (const char* name : {"no_proxy", "NO_PROXY"})
    if (const char* value = get(name)) {
      env.no_proxy = value;
      break;
    }
  return env;
}

} // namespace coretry::http
