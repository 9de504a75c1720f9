#ifndef CORETRY_HTTP_REQUEST_OPTIONS_HPP
#define CORETRY_HTTP_REQUEST_OPTIONS_HPP
/// @file
/// The settings of one request (request_options): its retry policy, the
/// shared objects its attempts report to (retry_controls, as async_retry's
/// retry_options has them), and what the client does with its body and
/// response.

#include <coretry/attempt.hpp>
#include <coretry/http/classify.hpp>
#include <coretry/http/exchange.hpp>
#include <coretry/http/redirect.hpp>
#include <coretry/phases.hpp>
#include <coretry/policy.hpp>
#include <coretry/retry_options.hpp>

#include <boost/beast/http/message.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coretry::http {

/// Per-request settings. The shared controls (budget, gate, tracker, limit,
/// observer, random, cancellation_repeat) are retry_controls', as
/// retry_options has them; what else async_retry takes the client derives
/// from the request (whether it may be repeated: its method or its
/// Idempotency-Key) and from `route` (the operation's name). With the HTTP
/// client a `limit` permit is held until the attempt's exchange has ended,
/// and none free (after a short wait) stops the request with
/// stop_reason::concurrency_limited before anything is sent; the `tracker`
/// is told every attempt's latency (an observed attempt limit,
/// policy::observed, needs one).
struct request_options : retry_controls {
  /// The retry policy, hedging included (policy::hedging): a hedge is an
  /// attempt of its own, on another connection of the pool (a new one when
  /// none is idle); a losing attempt is cancelled and its connection closed,
  /// never pooled. Hedging needs a request that is safe to repeat, a body
  /// held in memory (not `body`) and no streamed response (`stream_body`):
  /// async_send throws std::invalid_argument otherwise.
  coretry::policy policy{};
  /// Bounded route template for events and metrics ("/books/{id}"), never
  /// the URL with its query. Must outlive the request; a literal does.
  std::string_view route = "request";
  /// Send this Idempotency-Key on every attempt: the same key and the same
  /// payload each time. Makes POST and PATCH retryable.
  std::optional<std::string> idempotency_key;
  /// Generate a random UUID key for this logical request (ignored when a key
  /// is given or the request already has an Idempotency-Key header).
  bool generate_idempotency_key = false;
  /// Consulted in order before the default table (classify_exchange).
  std::vector<classifier_extension> classifiers;
  /// Called on a complete 2xx response: return a problem to reject it
  /// permanently ("asked for 40 characters, got 12").
  std::function<std::optional<std::string>(const response&)> validate;
  /// For a body that is not held in memory: returns the body for attempt N,
  /// reopened; nullopt when it cannot be reproduced (the attempt then fails
  /// permanently instead of sending a consumed stream).
  std::function<std::optional<std::string>(unsigned attempt)> body;
  /// Streams response bodies instead of keeping them in `response::body()`.
  /// `stream_body` is called for each final response that has a body (not
  /// for HEAD, 204, 304 or a zero Content-Length), on every attempt, with
  /// its header, as soon as the header is parsed. When it returns true, that
  /// body is passed to `body_sink` piece by piece as it is parsed, in order
  /// (each piece no larger than the connection's read buffer), and
  /// `response::body()` stays empty: memory stays bounded whatever the size,
  /// and client_options::body_limit does not apply to that body (the sink
  /// bounds it). Bodies it declines are kept in memory, limit included.
  /// Both run on the operation's executor, between two reads of the
  /// connection. A non-zero error from `body_sink` ends the attempt with that
  /// error and closes the connection; an error the default classification
  /// does not know is permanent (a classifier may decide otherwise). A
  /// retried attempt's body starts over: a sink that keeps bytes must start
  /// again at each attempt (retry_observer::attempt_started). Both must be
  /// set for either to apply.
  std::function<bool(const boost::beast::http::response_header<>& header)> stream_body;
  std::function<boost::system::error_code(std::string_view piece)> body_sink;
  /// Called with each attempt's own copy of the request just before it is
  /// sent: for headers that differ per attempt, such as an attempt count or
  /// the time left for a downstream deadline (`context.deadline`). Header
  /// values it sets are checked for CR and LF like the caller's.
  std::function<void(request&, const attempt_context<std::chrono::steady_clock>& context)> decorate;
  /// Told each attempt's phase timings (exchange::phases) when its exchange
  /// ends, with this request's route.
  phase_observer* phases = nullptr;
  /// Following redirects (off by default): the rules and their defaults
  /// are redirect_options'. Each hop followed is in exchange::redirects.
  redirect_options redirects{};
};

} // namespace coretry::http

#endif
