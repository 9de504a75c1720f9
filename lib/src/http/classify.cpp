#include <coretry/classify.hpp>
#include <coretry/http/classify.hpp>
#include <coretry/http/proxy.hpp>
#include <coretry/http/retry_after.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/regex.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <memory>
#include <stdexcept>

namespace coretry::http {

namespace beast_http = boost::beast::http;

std::string_view to_string(stage s) noexcept {
  switch (s) {
  case stage::waiting_for_connection: return "waiting_for_connection";
  case stage::resolving: return "resolving";
  case stage::connecting: return "connecting";
  case stage::handshaking: return "handshaking";
  case stage::writing: return "writing";
  case stage::reading: return "reading";
  case stage::complete: return "complete";
  }
  return "invalid";
}

bool is_idempotent(beast_http::verb method) noexcept {
  switch (method) {
  case beast_http::verb::get:
  case beast_http::verb::head:
  case beast_http::verb::options:
  case beast_http::verb::trace:
  case beast_http::verb::put:
  case beast_http::verb::delete_: return true;
  default: return false;
  }
}

std::optional<duration> server_delay(const exchange& x) {
  if (!x.res) return std::nullopt;
  const unsigned status = x.res->result_int();
  if (status != 429 && status != 503 && status != 413) return std::nullopt;
  const auto field = x.res->find(beast_http::field::retry_after);
  if (field == x.res->end()) return std::nullopt;
  // An HTTP-date is measured against the server's own clock when it sent one.
  std::chrono::system_clock::time_point reference = x.received_at;
  // A Date the clock cannot hold (saturated to its minimum or maximum) is no
  // reference: the delay would be measured from the wrong end of time.
  if (const auto date = x.res->find(beast_http::field::date); date != x.res->end())
    if (const auto server_now = parse_http_date(date->value());
        server_now && *server_now != std::chrono::system_clock::time_point::min() &&
        *server_now != std::chrono::system_clock::time_point::max())
      reference = *server_now;
  return parse_retry_after(field->value(), reference);
}

namespace {

bool is_certificate_failure(const boost::system::error_code& ec) {
  if (ec.category() != boost::asio::error::get_ssl_category()) return false;
  return ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_CERTIFICATE_VERIFY_FAILED;
}

/// The server's refusal of this client's certificate, or of its absence:
/// TLS alerts it sends during the handshake (TLS 1.2) or with its first
/// record after it (TLS 1.3). Sending the same again gets the same refusal.
bool is_client_certificate_refused(const boost::system::error_code& ec) {
  if (ec.category() != boost::asio::error::get_ssl_category()) return false;
  switch (ERR_GET_REASON(static_cast<unsigned long>(ec.value()))) {
  case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
  case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
  case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
  case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
  case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
  case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
  case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
  case SSL_R_TLSV1_ALERT_ACCESS_DENIED: return true;
  default: return false;
  }
}

/// A proxy's refusal to open a tunnel: the request never reached the origin.
verdict classify_proxy_refusal(const boost::system::error_code& ec, const exchange& x) {
  if (ec != proxy_error::refused) return verdict::permanent("proxy_bad_answer", delivery::never_sent);
  switch (x.proxy_status) {
  case 502: return verdict::transient("proxy_502", delivery::never_sent);
  case 503: return verdict::transient("proxy_503", delivery::never_sent);
  case 504: return verdict::transient("proxy_504", delivery::never_sent);
  case 407: return verdict::permanent("proxy_407", delivery::never_sent);
  }
  return verdict::permanent("proxy_refused", delivery::never_sent);
}

bool is_response_limit(const boost::system::error_code& ec) {
  return ec == beast_http::error::header_limit || ec == beast_http::error::body_limit ||
         ec == beast_http::error::buffer_overflow;
}

bool is_malformed_response(const boost::system::error_code& ec) {
  return ec.category() == beast_http::make_error_code(beast_http::error::bad_version).category() &&
         ec != beast_http::error::end_of_stream && ec != beast_http::error::partial_message;
}

verdict classify_transport(const boost::system::error_code& ec, const exchange& x) {
  // Before the first byte of the request left, repeating is safe whatever
  // the method: the server cannot have acted on it.
  const bool unsent = x.reached < stage::writing || (x.reached == stage::writing && x.bytes_written == 0 &&
                                                      !x.reused_connection);
  const delivery d = unsent ? delivery::never_sent : delivery::unknown;
  if (ec == attempt_error::timed_out) return verdict::transient("timeout", d).overloaded();
  // The pool refused a waiter too late to fit an exchange: nothing left. A
  // sign of overload: the connections to the origin are all held too long.
  if (ec == pool_error::too_late) return verdict::transient("pool_too_late", delivery::never_sent).overloaded();
  if (ec.category() == proxy_error_category()) return classify_proxy_refusal(ec, x);
  if (is_certificate_failure(ec)) return verdict::permanent("tls_verification", delivery::never_sent);
  if (is_client_certificate_refused(ec)) return verdict::permanent("tls_client_certificate", delivery::never_sent);
  if (is_response_limit(ec)) return verdict::permanent("response_too_large", delivery::unknown);
  if (x.reached == stage::handshaking) return verdict::transient("tls_handshake", delivery::never_sent);
  if (ec == beast_http::error::end_of_stream || ec == beast_http::error::partial_message ||
      ec == boost::asio::ssl::error::stream_truncated)
    return verdict::transient("connection_closed", d);
  if (is_malformed_response(ec)) return verdict::permanent("bad_response", delivery::unknown);
  verdict v = classify_error(ec);
  if (v.status == attempt_status::transient && unsent) v.delivered = delivery::never_sent;
  return v;
}

std::string_view status_category(unsigned status) {
  switch (status) {
  case 407: return "http_407";
  case 408: return "http_408";
  case 413: return "http_413";
  case 429: return "http_429";
  case 500: return "http_500";
  case 502: return "http_502";
  case 503: return "http_503";
  case 504: return "http_504";
  }
  if (status >= 500) return "http_5xx";
  if (status >= 400) return "http_4xx";
  if (status >= 300) return "http_3xx";
  return "http_other";
}

} // namespace

verdict classify_exchange(const boost::system::error_code& ec, const exchange& x) {
  const boost::system::error_code& failure = ec ? ec : x.error;
  if (failure) return classify_transport(failure, x);
  if (!x.problem.empty()) return verdict::permanent("invalid_response");
  if (!x.res) return verdict::permanent("no_response", delivery::unknown);
  const unsigned status = x.res->result_int();
  // Beast reads any three digits; statuses outside 100-599 are not HTTP's.
  if (status < 100 || status > 599) return verdict::permanent("bad_status");
  if (status >= 200 && status < 300) return verdict::success("http_2xx");
  switch (status) {
  case 408: case 500: case 502: case 504:
    return verdict::transient(status_category(status), delivery::answered);
  case 429: case 503:
    return verdict::transient(status_category(status), delivery::answered, server_delay(x)).overloaded();
  case 413:
    // Too large, unless the server says when it can take it (RFC 9110 §15.5.14).
    if (auto delay = server_delay(x)) return verdict::transient("http_413", delivery::answered, delay);
    return verdict::permanent("http_413");
  }
  return verdict::permanent(status_category(status));
}

classifier_extension permanent_429_when_header(std::string header, std::string value) {
  return [header = std::move(header), value = std::move(value)](const boost::system::error_code& ec,
                                                                 const exchange& x) -> std::optional<verdict> {
    if (ec || !x.res || x.res->result_int() != 429) return std::nullopt;
    const auto field = x.res->find(header);
    // Absent is not zero: only an exact match decides.
    if (field == x.res->end() || field->value() != value) return std::nullopt;
    return verdict::permanent("out_of_credits");
  };
}

classifier_extension permanent_5xx_when_body(std::function<bool(std::string_view body)> matches) {
  if (!matches) throw std::invalid_argument("coretry::http::permanent_5xx_when_body: no predicate");
  return [matches = std::move(matches)](const boost::system::error_code& ec,
                                        const exchange& x) -> std::optional<verdict> {
    if (ec || !x.res || x.res->result_int() < 500 || x.res->result_int() > 599) return std::nullopt;
    if (!matches(x.res->body())) return std::nullopt;
    return verdict::permanent("upstream_refused");
  };
}

classifier_extension permanent_5xx_when_body_matches(std::string_view pattern, letter_case cases) {
  if (pattern.empty())
    throw std::invalid_argument("coretry::http::permanent_5xx_when_body_matches: the pattern is empty");
  // Boost.Regex, not std::regex: libstdc++'s matcher recurses once per
  // character, so a long body overflows the stack. Boost's keeps its stack
  // on the heap and throws when a search exceeds its memory or work limits.
  auto flags = boost::regex::ECMAScript | boost::regex::no_mod_s;
  if (cases == letter_case::insensitive) flags |= boost::regex::icase;
  std::shared_ptr<const boost::regex> expression;
  try {
    expression = std::make_shared<const boost::regex>(pattern.begin(), pattern.end(), flags);
  } catch (const boost::regex_error& error) {
    throw std::invalid_argument(
        std::string{"coretry::http::permanent_5xx_when_body_matches: not a valid regular expression: "} +
        error.what());
  }
  return permanent_5xx_when_body([expression](std::string_view body) {
    try {
      return boost::regex_search(body.begin(), body.end(), *expression);
    } catch (const std::runtime_error&) {
      // Too much work or memory for this body: not a match.
      return false;
    }
  });
}

} // namespace coretry::http
