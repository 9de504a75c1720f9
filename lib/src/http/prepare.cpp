#include "prepare.hpp"

#include <coretry/http/idempotency.hpp>
#include <coretry/http/syntax.hpp>

#include <boost/beast/core/string.hpp>
#include <boost/uuid/random_generator.hpp>
#include <boost/uuid/uuid_io.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <stdexcept>

namespace coretry::http {

namespace beast_http = boost::beast::http;

std::string new_idempotency_key() { return boost::uuids::to_string(boost::uuids::random_generator()()); }

namespace detail {
namespace {

std::string base64(std::string_view bytes) {
  static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t group = 0;
    for (std::size_t k = 0; k < 3; ++k)
      group = (group << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) out += k <= n ? alphabet[(group >> (18 - 6 * k)) & 0x3f] : '=';
  }
  return out;
}

} // namespace

/// Text safe to quote in an error message: control and non-ASCII bytes as \xNN.
std::string printable(std::string_view text, std::size_t most) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (const char c : text.substr(0, most)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += digits[byte >> 4];
      out += digits[byte & 0xf];
    }
  }
  return text.size() > most ? out + "..." : out;
}

std::string basic_credentials(std::string_view user, std::string_view password) {
  std::string pair;
  pair.reserve(user.size() + 1 + password.size());
  pair.append(user).append(1, ':').append(password);
  return "Basic " + base64(pair);
}

namespace {

std::optional<std::string> target_problem(std::string_view target) {
  if (std::any_of(target.begin(), target.end(),
                  [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == '\x7f'; }))
    return "the request target contains a space, CR, LF or control character";
  return std::nullopt;
}

} // namespace

std::optional<std::string> request_problem(const request& req) {
  if (!is_token(req.method_string()))
    return "the method '" + printable(req.method_string()) + "' is not a token";
  if (auto problem = target_problem(req.target())) return problem;
  for (const auto& field : req) {
    if (!is_token(field.name_string()))
      return "the header name '" + printable(field.name_string()) + "' is not a token";
    if (!is_field_value(field.value()))
      return "header '" + std::string(field.name_string()) + "' has a value with CR, LF, NUL or a control character";
  }
  // The body's framing, as the client writes it (write_request_head): by
  // one Content-Length that is the body's size, or as chunked; a decorator
  // that changed the body after the framing was set would otherwise send
  // bytes the server reads as another request.
  const std::size_t lengths = req.count(beast_http::field::content_length);
  const std::size_t encodings = req.count(beast_http::field::transfer_encoding);
  if (lengths != 0 && encodings != 0) return "the request has both Content-Length and Transfer-Encoding";
  if (lengths > 1) return "the request has more than one Content-Length";
  const std::string size = std::to_string(req.body().size());
  if (lengths == 1 && req[beast_http::field::content_length] != size)
    return "the request's Content-Length is not its body's size (" + size + " bytes)";
  if (encodings > 1 || (encodings == 1 && !boost::beast::iequals(req[beast_http::field::transfer_encoding], "chunked")))
    return "the request's Transfer-Encoding is not chunked alone (the client frames a body as one chunk, "
           "and applies no other coding)";
  if (lengths == 0 && encodings == 0 && !req.body().empty())
    return "the request has a body (" + size + " bytes) but neither Content-Length nor chunked framing";
  return std::nullopt;
}

origin_names names_of(const url_parts& parts) {
  const std::string_view scheme = parts.tls ? "https://" : "http://";
  char port[8];
  const char* const port_end = std::to_chars(port, port + sizeof port, parts.port).ptr;
  const std::string_view port_text(port, static_cast<std::size_t>(port_end - port));
  origin_names names;
  // One allocation for each, not one per piece joined.
  names.key.reserve(scheme.size() + parts.host.size() + 1 + port_text.size());
  names.key.append(scheme).append(parts.host).append(1, ':').append(port_text);
  // The same name that is looked up and, over TLS, verified.
  const bool v6 = parts.host.find(':') != std::string::npos;
  const bool default_port = !parts.explicit_port || parts.port == (parts.tls ? 443 : 80);
  names.host.reserve(parts.host.size() + 2 + (default_port ? 0 : 1 + port_text.size()));
  if (v6) names.host.append(1, '[');
  names.host.append(parts.host);
  if (v6) names.host.append(1, ']');
  if (!default_port) names.host.append(1, ':').append(port_text);
  return names;
}

prepared_request prepare_request(url_parts&& parts, request&& req, const request_options& options,
                                 std::shared_ptr<const proxy_route> proxy, std::shared_ptr<const origin_names> names) {
  prepared_request prepared;
  origin& where = prepared.where;
  where.tls = parts.tls;
  where.host = parts.host;
  where.port = std::to_string(parts.port);
  prepared.names = names ? std::move(names) : std::make_shared<const origin_names>(names_of(parts));
  where.key = std::shared_ptr<const std::string>(prepared.names, &prepared.names->key);

  // A request without a target takes the URL's, sent from here rather
  // than copied into the request.
  if (req.target().empty()) prepared.target = std::move(parts.target);
  const std::string_view target =
      req.target().empty() ? std::string_view(prepared.target) : std::string_view(req.target());
  if (target.empty() || (target.front() != '/' && !(target == "*" && req.method() == beast_http::verb::options)))
    throw std::invalid_argument("coretry::http: the request target must begin with '/'");
  if (proxy && !where.tls) {
    // The proxy is told where the request goes by its target (RFC 9112 §3.2.2).
    const std::string_view bracket_open = where.host.find(':') != std::string::npos ? "[" : "";
    const std::string_view bracket_close = bracket_open.empty() ? "" : "]";
    if (target.front() == '/')
      req.target("http://" + std::string(bracket_open) + where.host + std::string(bracket_close) + ":" + where.port +
                 std::string(target));
    if (!proxy->authorization.empty() && req.find(beast_http::field::proxy_authorization) == req.end())
      req.set(beast_http::field::proxy_authorization, proxy->authorization);
  }
  where.proxy = std::move(proxy);
  if (parts.user && req.find(beast_http::field::authorization) == req.end()) {
    // Credentials in the URL go as Basic authorization (to a redirect's
    // target only by the rules of redirect_options); a caller's own
    // Authorization wins.
    req.set(beast_http::field::authorization, basic_credentials(*parts.user, parts.password));
  }
  if (options.idempotency_key) {
    if (options.idempotency_key->find_first_of("\r\n") != std::string::npos)
      throw std::invalid_argument("coretry::http: idempotency key contains CR or LF");
    req.set("Idempotency-Key", *options.idempotency_key);
  } else if (options.generate_idempotency_key && req.find("Idempotency-Key") == req.end()) {
    // One key per logical operation, the same on every attempt.
    req.set("Idempotency-Key", new_idempotency_key());
  }
  req.prepare_payload();
  if (auto problem = request_problem(req)) throw std::invalid_argument("coretry::http: " + *problem);
  if (auto problem = target_problem(prepared.target)) throw std::invalid_argument("coretry::http: " + *problem);

  prepared.safety = is_idempotent(req.method()) ? repeat_safety::idempotent
                    : req.find("Idempotency-Key") != req.end() ? repeat_safety::idempotency_key
                                                               : repeat_safety::unsafe;
  prepared.req = std::move(req);
  prepared.body = options.body;
  prepared.decorate = options.decorate;
  prepared.validate = options.validate;
  prepared.classifiers = options.classifiers;
  prepared.streaming = {options.stream_body, options.body_sink};
  prepared.route = options.route;
  prepared.phases = options.phases;
  return prepared;
}

std::optional<std::string> copy_for_attempt(const prepared_request& prepared,
                                            const attempt_context<std::chrono::steady_clock>& context,
                                            std::string_view user_agent, std::optional<request>& out) {
  std::optional<std::string> body;
  if (prepared.body) {
    // A streamed body is reopened for every attempt, never resent consumed.
    body = prepared.body(context.number);
    if (!body) return "the request body cannot be reproduced for attempt " + std::to_string(context.number);
  }
  // The copy is the request as it will be sent: a decorator (one that signs
  // the request, say) sees the target, Host and User-Agent.
  request& copy = out.emplace(prepared.req);
  if (copy.target().empty()) copy.target(prepared.target);
  if (copy.find(beast_http::field::host) == copy.end()) copy.set(beast_http::field::host, prepared.names->host);
  if (!user_agent.empty() && copy.find(beast_http::field::user_agent) == copy.end())
    copy.set(beast_http::field::user_agent, user_agent);
  if (body) {
    copy.body() = std::move(*body);
    copy.prepare_payload();
  }
  if (prepared.decorate) prepared.decorate(copy, context);
  if (auto problem = request_problem(copy)) return "after the request decorator: " + *problem;
  return std::nullopt;
}

} // namespace detail
} // namespace coretry::http
