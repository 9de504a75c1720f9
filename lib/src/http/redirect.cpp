// A request that follows redirects: a chain of retrying operations, one per
// hop, under the first one's overall deadline and attempt limit
// (coretry/http/redirect.hpp for the rules, redirect_rules.cpp for the step
// from one hop to the next).
#include <coretry/http/client.hpp>

#include <coretry/http/redact.hpp>

#include "client_state.hpp"
#include "prepare.hpp"
#include "redirect.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace coretry::http {

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;

namespace detail {

/// The caller's observer, told of every hop's events as of one operation:
/// attempts numbered on and times from the chain's start, one stop (a hop
/// ended by a redirect that is followed does not stop the operation).
class chain_observer final : public retry_observer {
public:
  retry_observer* inner = nullptr;
  unsigned attempts_before = 0;
  duration started_at{};

  /// An event of the hop's, numbered on and timed from the chain's start.
  template <class Event>
  Event shifted(Event e) const noexcept {
    e.attempt += attempts_before;
    e.at += started_at;
    return e;
  }

  void attempt_started(const attempt_started_event& e) noexcept override { inner->attempt_started(shifted(e)); }
  void attempt_finished(const attempt_finished_event& e) noexcept override {
    attempt_record record = e.record;
    record.number += attempts_before;
    record.start += started_at;
    record.end += started_at;
    // The winner decides (with hedges, the losers finish after it, superseded).
    if (record.classified.status == attempt_status::success)
      last_redirected_ = record.classified.category == "redirect";
    inner->attempt_finished({e.operation, record});
  }
  void backoff_scheduled(const backoff_event& e) noexcept override {
    backoff_event moved = e;
    moved.next_attempt += attempts_before;
    moved.at += started_at;
    inner->backoff_scheduled(moved);
  }
  void attempt_stuck(const stuck_attempt_event& e) noexcept override { inner->attempt_stuck(shifted(e)); }
  void hedge(const hedge_event& e) noexcept override { inner->hedge(shifted(e)); }
  void permit_waited(const permit_wait_event& e) noexcept override { inner->permit_waited(shifted(e)); }
  void stopped(const stop_event& e) noexcept override {
    if (e.reason == stop_reason::succeeded && last_redirected_) return; // the chain goes on
    stop_event moved = e;
    moved.attempts += attempts_before;
    moved.at += started_at;
    moved.total_backoff += backoff_before;
    inner->stopped(moved);
  }
  /// A chain that ends between hops (its deadline) stops here.
  void chain_stopped(std::string_view operation, stop_reason reason, duration at) noexcept {
    inner->stopped({operation, reason, attempts_before, at, backoff_before});
  }
  duration backoff_before{};

private:
  bool last_redirected_ = false;
};

struct redirect_chain {
  std::shared_ptr<client_state> state;
  chain_observer observer;
  /// The caller's options (their policy is the whole chain's) and request, as given.
  request_options options;
  request original;
  /// The first URL read: the origin credentials go to, and its userinfo.
  url_parts first;
  /// The URL requested now, fragment included, and how.
  std::string url;
  bool own_userinfo = false;
  bool became_get = false;
  /// The first hop's Idempotency-Key (generated or given), kept by 307 and 308.
  std::string idempotency_key;

  /// The hop now: its request and engine options.
  std::shared_ptr<const prepared_request> prepared;
  retry_options retry;
  coretry::policy policy;
  std::chrono::steady_clock::time_point hop_started;

  /// The chain so far.
  std::chrono::steady_clock::time_point started;
  result combined;
  std::vector<redirect_hop> hops;
  unsigned retries = 0; ///< attempts past each hop's first

  asio::any_io_executor ex;
  /// The caller's slot, forwarded to `signal`, which each hop's operation
  /// hears: a cancellation that comes between two hops is kept in
  /// `cancelled` rather than lost.
  asio::cancellation_slot slot;
  asio::cancellation_signal signal;
  asio::cancellation_type cancelled = asio::cancellation_type::none;
  /// Emplaced, never assigned: Boost 1.81's move assignment of an
  /// any_completion_handler wraps it in itself without end.
  std::optional<asio::any_completion_handler<retry_signature<exchange>>> handler;
};

namespace {

bool same_origin(const url_parts& a, const url_parts& b) {
  return a.tls == b.tls && a.host == b.host && a.port == b.port;
}

/// The fields that describe a body, dropped with it when a redirect turns
/// the request into a GET (RFC 9110 §15.4).
constexpr beast_http::field content_fields[] = {
    beast_http::field::content_type,     beast_http::field::content_length,   beast_http::field::content_encoding,
    beast_http::field::content_language, beast_http::field::content_location, beast_http::field::transfer_encoding,
    beast_http::field::digest,
};

/// The verdict of a hop's answer that is a redirect to follow or to refuse
/// (the chain's own classifier, after the caller's).
classifier_extension redirect_classifier(std::string url, beast_http::verb method, unsigned hops,
                                         redirect_options options) {
  return [url = std::move(url), method, hops, options](const boost::system::error_code& ec,
                                                       const exchange& x) -> std::optional<verdict> {
    if (ec || x.error || !x.res || !is_followed_status(x.res->result_int())) return std::nullopt;
    const redirect_step step = next_redirect(url, method, *x.res, hops, options);
    switch (step.action) {
    case redirect_step::kind::final_answer: return std::nullopt;
    case redirect_step::kind::follow: return verdict::success("redirect");
    case redirect_step::kind::refuse: return verdict::permanent(redirect_category(step.error));
    }
    return std::nullopt;
  };
}

/// `o` for a hop to `url` by `method` after `hops` redirects: the chain's
/// classifier last among the caller's, and no redirect's body streamed to
/// the caller's sink.
void adapt(request_options& o, const std::string& url, beast_http::verb method, std::size_t hops) {
  o.classifiers.push_back(redirect_classifier(url, method, static_cast<unsigned>(hops), o.redirects));
  if (o.stream_body)
    o.stream_body = [stream = std::move(o.stream_body)](const beast_http::response_header<>& header) {
      if (is_followed_status(header.result_int()) && header.find(beast_http::field::location) != header.end())
        return false;
      return stream(header);
    };
}

} // namespace
} // namespace detail

std::shared_ptr<detail::redirect_chain> client::start_chain(std::string_view url, request&& req,
                                                            const request_options& options) const {
  if (options.redirects.max_redirects > redirect_options::max_redirects_cap)
    throw std::invalid_argument("coretry::http: redirects.max_redirects must be at most " +
                                std::to_string(redirect_options::max_redirects_cap));
  auto chain = std::make_shared<detail::redirect_chain>();
  chain->state = state_;
  chain->first = state_->parts_of(url); // throws on a bad URL
  chain->url = std::string(url);
  chain->options = options;
  chain->original = req;
  chain->policy = options.policy;
  request_options first = options;
  detail::adapt(first, chain->url, req.method(), 0);
  if (first.observer) {
    chain->observer.inner = first.observer;
    first.observer = &chain->observer;
  }
  prepared p = prepare_parts(*state_, url_parts(chain->first), std::move(req), first);
  if (const auto key = p.request->req.find("Idempotency-Key"); key != p.request->req.end())
    chain->idempotency_key = std::string(key->value());
  // The first hop's setup refused from the caller's call, as a request
  // that follows no redirects is.
  if (auto problem = retry_setup_problem(options.policy, p.retry)) throw std::invalid_argument(*problem);
  chain->prepared = std::move(p.request);
  chain->retry = p.retry;
  return chain;
}

namespace {

/// The engine's options and the request for the chain's next hop, or the
/// reason it cannot be sent (a target the client refuses).
template <class Prepared, class Prepare>
std::optional<std::string> prepare_hop(detail::redirect_chain& c, Prepared& out, Prepare prepare) {
  url_parts parts;
  try {
    parts = c.state->parts_of(c.url);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  const bool same = detail::same_origin(parts, c.first);
  const bool credentials = same || c.options.redirects.trusted;
  if (!c.own_userinfo) {
    if (credentials && c.first.user) {
      parts.user = c.first.user;
      parts.password = c.first.password;
    } else {
      parts.user.reset();
      parts.password.clear();
    }
  }

  request req = c.original;
  req.target({}); // the URL's
  if (c.became_get) {
    req.method(beast_http::verb::get);
    req.body().clear();
    for (const auto field : detail::content_fields) req.erase(field);
    req.erase("Idempotency-Key");
  }
  if (!credentials) {
    req.erase(beast_http::field::authorization);
    req.erase(beast_http::field::cookie);
  }
  // Proxy credentials the caller set are for the first request's way out;
  // trusting the hops' servers does not send them there (the proxy chosen
  // for a hop gets its own from the proxy settings).
  if (!same) req.erase(beast_http::field::proxy_authorization);
  if (!same) req.erase(beast_http::field::host);

  request_options o = c.options;
  o.generate_idempotency_key = false;
  o.idempotency_key.reset();
  if (!c.became_get && !c.idempotency_key.empty()) o.idempotency_key = c.idempotency_key;
  if (!same) {
    // Another dependency: the first one's gate, tracker and limit are not
    // told of it.
    o.gate = nullptr;
    o.tracker = nullptr;
    o.limit = nullptr;
    o.policy.observed.reset();
    // A hedge delay from the first dependency's latencies says nothing of
    // this one: the policy's fixed delay instead.
    o.policy.hedging.delay_percentile.reset();
  }
  if (c.became_get) {
    o.body = nullptr;
  } else if (o.body) {
    // Numbered on from the attempts before: a body that cannot be reopened
    // again says so.
    o.body = [body = std::move(o.body), before = c.combined.attempts](unsigned attempt) {
      return body(before + attempt);
    };
  }
  detail::adapt(o, c.url, req.method(), c.hops.size());
  if (o.observer) o.observer = &c.observer;
  c.policy = o.policy;
  try {
    out = prepare(*c.state, std::move(parts), std::move(req), o);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return std::nullopt;
}

} // namespace

void client::follow_redirects(std::shared_ptr<detail::redirect_chain> chain, asio::any_io_executor ex,
                              asio::cancellation_slot slot, asio::any_completion_handler<retry_signature<exchange>> handler) {
  chain->ex = std::move(ex);
  chain->slot = slot;
  chain->handler.emplace(std::move(handler));
  if (slot.is_connected()) {
    // Cleared before the chain completes: the chain outlives the handler.
    slot.assign([c = chain.get()](asio::cancellation_type type) {
      c->cancelled |= type;
      c->signal.emit(type);
    });
  }
  chain->started = std::chrono::steady_clock::now();
  run_hop(std::move(chain));
}

void client::run_hop(std::shared_ptr<detail::redirect_chain> chain) {
  detail::redirect_chain& c = *chain;
  const auto finish = [](std::shared_ptr<detail::redirect_chain> done, result r) {
    detail::redirect_chain& d = *done;
    r.attempts = d.combined.attempts;
    r.records = std::move(d.combined.records);
    r.total_backoff = d.combined.total_backoff;
    r.winner = d.combined.winner;
    r.elapsed = std::chrono::steady_clock::now() - d.started;
    if (!d.hops.empty()) {
      if (!r.value) r.value.emplace();
      r.value->redirects = std::move(d.hops);
    }
    if (d.slot.is_connected()) d.slot.clear();
    auto handler = std::move(*d.handler);
    done.reset();
    std::move(handler)(nullptr, std::move(r));
  };

  // The chain stopped before this hop: told to the observer; the answer
  // so far is the chain's.
  const auto stopped_before_hop = [&c](stop_reason reason) {
    if (c.observer.inner)
      c.observer.chain_stopped(c.options.route, reason,
                               std::chrono::duration_cast<duration>(c.hop_started - c.started));
    result r;
    r.reason = reason;
    r.value = std::move(c.combined.value);
    r.last_error = c.combined.last_error;
    return r;
  };

  c.hop_started = std::chrono::steady_clock::now();
  if (c.cancelled != asio::cancellation_type::none) {
    // Cancelled between two hops.
    result r = stopped_before_hop(stop_reason::cancelled);
    finish(std::move(chain), std::move(r));
    return;
  }
  // The hop's share of the chain's policy: what is left of the overall
  // deadline and of the retries.
  coretry::policy policy = c.policy;
  if (c.options.policy.overall_deadline != duration::max()) {
    const duration left = c.options.policy.overall_deadline -
                          std::chrono::duration_cast<duration>(c.hop_started - c.started);
    if (policy.completion_reserve > left - std::max(policy.min_attempt_allowance, duration(1))) {
      // Too little left for a useful attempt: the engine would not start one.
      result r = stopped_before_hop(stop_reason::deadline_exhausted);
      finish(std::move(chain), std::move(r));
      return;
    }
    policy.overall_deadline = left;
  }
  policy.max_attempts = c.options.policy.max_attempts - std::min(c.retries, c.options.policy.max_attempts - 1);
  if (auto problem = retry_setup_problem(policy, c.retry)) {
    // A later hop the engine would refuse to start (the first hop's setup
    // was checked when the chain was made): the chain ends here, through
    // its handler, never by an exception out of a completion.
    result r = stopped_before_hop(stop_reason::rejected);
    if (!r.value) r.value.emplace();
    r.value->problem = "after " + std::to_string(c.hops.size()) + " redirect(s), to " + redact_url(c.url) +
                       ": the hop cannot be started: " + *problem;
    r.last_error = make_error_code(redirect_error::bad_location);
    finish(std::move(chain), std::move(r));
    return;
  }
  c.observer.attempts_before = c.combined.attempts;
  c.observer.backoff_before = c.combined.total_backoff;
  c.observer.started_at = std::chrono::duration_cast<duration>(c.hop_started - c.started);

  auto state = c.state;
  auto request = c.prepared;
  const asio::any_io_executor io = state->executor;
  auto done = [chain = std::move(chain), finish](std::exception_ptr error, result r) mutable {
    detail::redirect_chain& c = *chain;
    // The hop's attempts join the chain's, numbered on and timed from its start.
    const unsigned before = c.combined.attempts;
    const duration offset = std::chrono::duration_cast<duration>(c.hop_started - c.started);
    for (attempt_record record : r.records) {
      record.number += before;
      record.start += offset;
      record.end += offset;
      c.combined.records.push_back(record);
    }
    c.combined.attempts += r.attempts;
    c.retries += r.attempts > 0 ? r.attempts - 1 : 0;
    c.combined.total_backoff += r.total_backoff;
    c.combined.winner = r.winner ? before + r.winner : 0;
    if (error) {
      r.attempts = c.combined.attempts;
      r.records = std::move(c.combined.records);
      if (c.slot.is_connected()) c.slot.clear();
      auto handler = std::move(*c.handler);
      chain.reset();
      std::move(handler)(std::move(error), std::move(r));
      return;
    }
    const beast_http::verb method = c.prepared->req.method();
    if (r.value && r.value->res && (r.succeeded() || r.reason == stop_reason::rejected)) {
      const detail::redirect_step step =
          detail::next_redirect(c.url, method, *r.value->res, static_cast<unsigned>(c.hops.size()),
                                c.options.redirects);
      if (step.action == detail::redirect_step::kind::follow && r.succeeded()) {
        redirect_hop hop;
        hop.method = std::string(c.prepared->req.method_string());
        hop.url = redact_url(c.url);
        hop.status = r.value->res->result_int();
        hop.location = std::string((*r.value->res)[beast_http::field::location]);
        hop.target = redact_url(step.target);
        hop.address = r.value->address;
        c.hops.push_back(std::move(hop));
        c.url = step.target;
        c.own_userinfo = step.own_userinfo;
        c.became_get = c.became_get || step.to_get;
        c.combined.value = std::move(r.value);
        c.combined.last_error = r.last_error;
        prepared next;
        if (auto problem = prepare_hop(c, next, &client::prepare_parts)) {
          // Refused as a first request would be: the chain ends here.
          if (c.observer.inner)
            c.observer.chain_stopped(c.options.route, stop_reason::rejected,
                                     std::chrono::duration_cast<duration>(std::chrono::steady_clock::now() - c.started));
          result refused;
          refused.reason = stop_reason::rejected;
          refused.value = std::move(c.combined.value);
          refused.value->problem = "the redirect's target cannot be requested: " + *problem;
          refused.last_error = make_error_code(redirect_error::bad_location);
          finish(std::move(chain), std::move(refused));
          return;
        }
        c.prepared = std::move(next.request);
        c.retry = next.retry;
        run_hop(std::move(chain));
        return;
      }
      if (step.action == detail::redirect_step::kind::refuse && r.reason == stop_reason::rejected &&
          !r.records.empty() && r.records.back().classified.category == detail::redirect_category(step.error)) {
        r.last_error = make_error_code(step.error);
        r.value->problem = step.problem;
      }
    }
    if (!c.hops.empty() && r.value && !r.value->problem.empty() &&
        r.value->problem.starts_with("the request body cannot be reproduced"))
      r.value->problem = "after " + std::to_string(c.hops.size()) + " redirect(s), to " + redact_url(c.url) + ": " +
                         r.value->problem;
    finish(std::move(chain), std::move(r));
  };
  auto bound = asio::bind_executor(c.ex, asio::bind_cancellation_slot(c.signal.slot(), std::move(done)));
  coretry::async_retry<asio::steady_timer>(io, policy, c.retry, attempt_factory(state, request, io),
                                           classifier_of(state, request), std::move(bound));
}

} // namespace coretry::http
