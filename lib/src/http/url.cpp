#include <coretry/http/url.hpp>
#include <coretry/http/syntax.hpp>

#include <coretry/http/redact.hpp>
#include <coretry/net/authority.hpp>

#include "text_reading.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/url/parse.hpp>

#include <algorithm>
#include <stdexcept>

namespace coretry::http {

namespace {

std::string refused(std::string_view url, const std::string& problem) { return problem + ": " + redact_url(url); }

/// Reads `url` into `parts`; the problem when it is refused.
std::optional<std::string> read_url(std::string_view url, url_parts& parts) {
  // Boost.URL checks the URL's grammar and scheme; the authority is then
  // read from the text itself, so that what is looked up is what it says.
  auto parsed = boost::urls::parse_uri(url);
  if (!parsed) {
    if (url.find("://") == std::string_view::npos)
      return refused(url, "not an absolute URL (it has no scheme; write it as http://... or https://...)");
    return refused(url, "not an absolute URL");
  }
  const auto scheme = parsed->scheme_id();
  if (scheme != boost::urls::scheme::http && scheme != boost::urls::scheme::https)
    return "URL scheme must be http or https, not '" + std::string(parsed->scheme()) + "'" +
           (url.substr(parsed->scheme().size()).starts_with("://") ? "" : " (did you leave out http://?)");
  parts.tls = scheme == boost::urls::scheme::https;
  std::string_view rest = url.substr(parsed->scheme().size() + 1);
  if (rest.substr(0, 2) != "//") return refused(url, "URL has no host");
  rest.remove_prefix(2);
  const std::size_t authority_end = std::min(rest.find_first_of("/?#"), rest.size());
  std::string_view authority = rest.substr(0, authority_end);
  rest.remove_prefix(authority_end);

  if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = authority.substr(0, at);
    authority.remove_prefix(at + 1);
    const std::size_t colon = userinfo.find(':');
    auto user = percent_decoded(userinfo.substr(0, colon));
    auto password = percent_decoded(colon == std::string_view::npos ? std::string_view{} : userinfo.substr(colon + 1));
    if (!user || !password) return refused(url, "URL userinfo has a malformed percent escape");
    if (!userinfo.empty()) {
      parts.user = std::move(*user);
      parts.password = std::move(*password);
    }
  }

  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) return refused(url, "URL has an unterminated IPv6 address");
    const std::string_view inside = authority.substr(1, close - 1);
    if (inside.find('%') != std::string_view::npos) return refused(url, "URL IPv6 zone identifiers are not supported");
    boost::system::error_code ec;
    const auto address = boost::asio::ip::make_address_v6(std::string(inside), ec);
    if (ec) return refused(url, "URL host is not a valid IPv6 address");
    parts.host = address.to_string();
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':') return refused(url, "URL has characters after its IPv6 address");
    if (!after.empty()) port_text = after.substr(1);
    if (!after.empty()) parts.explicit_port = true;
  } else {
    const std::size_t colon = authority.find(':');
    const std::string_view host_text = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      parts.explicit_port = true;
    }
    if (host_text.empty()) return refused(url, "URL has no host");
    const auto host = percent_decoded(host_text);
    if (!host || !net::is_dns_name(*host))
      return refused(url, "URL host is not a DNS name or an IP address (percent escapes included)");
    parts.host = *host;
    std::transform(parts.host.begin(), parts.host.end(), parts.host.begin(),
                   [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
  }
  if (port_text.empty()) {
    parts.explicit_port = false;
    parts.port = parts.tls ? 443 : 80;
  } else {
    // At most five digits: a port written longer is refused, leading zeros or not.
    const auto port = port_text.size() > 5 ? std::nullopt : net::parse_port(port_text);
    if (!port) return refused(url, "URL port must be a number from 1 to 65535");
    parts.port = *port;
  }

  const std::string_view path_and_query = rest.substr(0, rest.find('#'));
  if (!path_and_query.empty() && path_and_query.front() != '/' && path_and_query.front() != '?')
    return refused(url, "URL path must begin with '/'");
  parts.target = path_and_query.empty() || path_and_query.front() == '?' ? "/" : "";
  parts.target += path_and_query;
  return std::nullopt;
}

} // namespace


url_parts parse_url(std::string_view url) { return detail::read_or_throw<url_parts>(url, read_url); }

std::optional<std::string> url_problem(std::string_view url) { return detail::reading_problem<url_parts>(url, read_url); }

} // namespace coretry::http
