#ifndef CORETRY_SRC_HTTP_PREPARE_HPP
#define CORETRY_SRC_HTTP_PREPARE_HPP

// Request preparation: from a URL, a request and its options to what every
// attempt sends (Basic authorization from the URL's userinfo,
// Idempotency-Key, framing; Host and User-Agent are written with the head,
// request_head.hpp), checked so that the request is what it says and no more. Internal to coretry::http.

#include <coretry/http/request_options.hpp>
#include <coretry/http/url.hpp>

#include "address_health.hpp"
#include "connect.hpp"
#include "streamed_body.hpp"

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coretry::http::detail {

/// What the requests to one origin share: the pool's key and the Host value
/// the client sends when a request has none. Made once per origin
/// (client_state::names_of), not once per request.
struct origin_names {
  std::string key;  ///< "https://host:port"
  std::string host; ///< "host", "host:port" off the default port, "[v6]" bracketed
};

/// The names of the origin of `parts`.
origin_names names_of(const url_parts& parts);

/// A request ready for its attempts, shared by them and never changed
/// (but for the addresses its attempts used).
struct prepared_request {
  origin where;
  /// What the client sends unless the request has its own: the Host value
  /// and, for a request without a target, the URL's.
  std::shared_ptr<const origin_names> names;
  std::string target;
  request req;
  std::function<std::optional<std::string>(unsigned)> body;
  std::function<void(request&, const attempt_context<std::chrono::steady_clock>&)> decorate;
  std::function<std::optional<std::string>(const response&)> validate;
  std::vector<classifier_extension> classifiers;
  body_streaming streaming; ///< empty unless the caller takes bodies piece by piece
  std::string_view route;   ///< request_options::route, for the phase observer
  phase_observer* phases = nullptr;
  /// Idempotent by method, made repeatable by an Idempotency-Key, or neither.
  repeat_safety safety = repeat_safety::unsafe;
  /// The addresses this operation's attempts used (address_health.hpp):
  /// the one thing of it that changes, as its attempts connect.
  mutable used_addresses used;
  /// Idempotent or keyed: may be sent again after an ambiguous failure.
  bool repeatable() const noexcept { return safety != repeat_safety::unsafe; }
};

/// Builds the prepared request for the URL `parts`. Throws std::invalid_argument naming the
/// problem: a target not beginning with '/', an
/// idempotency key with CR or LF, or anything request_problem finds.
/// With a `proxy`, an https:// origin is reached through its tunnel; an
/// http:// origin's request goes to the proxy in absolute form
/// ("http://host:port/path"), with Proxy-Authorization from the proxy URL's
/// credentials unless the request sets its own. `names`, when given, is
/// names_of(parts) made before (shared by the requests to one origin). Host
/// and the client's User-Agent are not inserted into the request: they are
/// written when it is sent (write_request_head), when it has none.
prepared_request prepare_request(url_parts&& parts, request&& req, const request_options& options,
                                 std::shared_ptr<const proxy_route> proxy = nullptr,
                                 std::shared_ptr<const origin_names> names = nullptr);

/// "Basic " and the base64 of "user:password" (RFC 7617), for Authorization
/// and Proxy-Authorization.
std::string basic_credentials(std::string_view user, std::string_view password);

/// Text safe to quote in an error message: control and non-ASCII bytes as
/// \xNN, at most `most` bytes of it, then "...".
std::string printable(std::string_view text, std::size_t most = 64);

/// What would make the request something other than what it says, or more
/// than one request: a method or header name that is not a token, a header
/// value with CR, LF, NUL or another control character (a tab is allowed),
/// a target with a space or control character, Content-Length together with
/// Transfer-Encoding (RFC 9112 §6.1: the framing would be ambiguous).
/// Checked on the prepared request and again on each decorated copy.
std::optional<std::string> request_problem(const request& req);

/// The attempt's own copy of the request in `out`, when its body is
/// reopened (prepared.body) or a decorator changes it: the target, Host and
/// User-Agent set as they will be sent, the body reopened for the attempt,
/// the decorator applied. The problem when it must not be sent: a body that
/// cannot be reproduced, or what request_problem finds after the decorator.
std::optional<std::string> copy_for_attempt(const prepared_request& prepared,
                                            const attempt_context<std::chrono::steady_clock>& context,
                                            std::string_view user_agent, std::optional<request>& out);

} // namespace coretry::http::detail

#endif
