#include "bookstore/bookstore.hpp"
#include "bookstore/server_metrics.hpp"

#include <coretry/budget.hpp>
#include <coretry/gate.hpp>
#include <coretry/latency_tracker.hpp>
#include <coretry/http/addresses.hpp>
#include <coretry/http/client.hpp>
#include <coretry/prometheus.hpp>
#include <coretry/prometheus_phases.hpp>
#if CORETRY_BOOKSTORE_SHARED_STATE
#include <coretry/redis/credentials.hpp>
#include <coretry/redis/shared_state.hpp>
#endif
#include <serving/listen_address.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <map>
#include <stdexcept>
#include <vector>

namespace coretry::bookstore {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using boost::system::error_code;
using tcp = asio::ip::tcp;
using strand_type = asio::strand<asio::io_context::executor_type>;
using std::chrono::milliseconds;
using std::chrono::steady_clock;
namespace serving = coretry::serving;
using serving::read_outcome;

constexpr auto nothrow_awaitable = asio::as_tuple(asio::use_awaitable);

std::string_view to_std(beast::string_view text) { return {text.data(), text.size()}; }

struct connection {
  connection(strand_type s, tcp::socket sock, std::uint64_t i) : strand(std::move(s)), stream(std::move(sock)), id(i) {}
  strand_type strand;
  beast::tcp_stream stream; // its timeouts bound each read and write
  std::uint64_t id;
  // Touched only on `strand`.
  bool busy = false;         ///< between reading a request and writing its response
  bool idle = false;         ///< waiting for a next request, no byte of it received
  bool call_pending = false; ///< a pricing call is outstanding
  bool in_backoff = false;   ///< that call is asleep between attempts
  asio::cancellation_signal cancel;
};

} // namespace

failure_answer answer_for(stop_reason reason, bool timed_out, bool gate_open, duration probe_interval) {
  failure_answer answer;
  if (reason == stop_reason::rejected) {
    answer.status = 502;
  } else if (reason == stop_reason::dependency_unhealthy) {
    answer.status = 503; // even after an attempt that timed out: the gate, not the deadline, ended the call
    if (!gate_open)
      answer.retry_after = std::max(std::chrono::seconds{1}, std::chrono::ceil<std::chrono::seconds>(probe_interval));
  } else if (reason == stop_reason::deadline_exhausted || timed_out) {
    answer.status = 504;
  }
  return answer;
}

std::optional<std::int64_t> parse_whole_number(std::string_view text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  const auto significant = text.find_first_not_of('0');
  if (significant == std::string_view::npos) return 0;
  text.remove_prefix(significant);
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  // Digits only, so the one failure left is a number too large: saturate
  // (a deadline is clamped to the local maximum anyway).
  if (error != std::errc{} || end != text.data() + text.size()) return INT64_MAX;
  return value;
}

bool valid_book_id(std::string_view id) {
  if (id.empty() || id.size() > 64 || id == "." || id == "..") return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.';
  });
}

std::string pricing_target(std::string_view pricing_url, std::string_view book_id) {
  std::string url{pricing_url};
  const auto at = url.find("{id}");
  if (at != std::string::npos) url.replace(at, 4, book_id);
  return url;
}

class server::state : public std::enable_shared_from_this<state> {
public:
  state(asio::io_context& io, options opts)
      : io_(io), opts_((validate(opts), std::move(opts))), strand_(asio::make_strand(io)), acceptor_(strand_),
        gate_(strand_, opts_.max_clients), grace_timer_(strand_), client_(io.get_executor(), client_options_for(opts_)), observer_({std::string{book_route}}) {
    if (!opts_.shared_state.empty()) {
      share();
    } else {
      if (opts_.budget) {
        auto bucket = std::make_shared<token_bucket_budget>();
        observer_.watch_budget("pricing", *bucket);
        budget_ = std::move(bucket);
      }
      if (opts_.gate) retry_gate_ = std::make_shared<local_gate>(opts_.gate_options);
    }
    if (retry_gate_) observer_.watch_gate("pricing", *retry_gate_);
    if (opts_.concurrency_limit) {
      limit_ = std::make_unique<coretry::concurrency_limit>(*opts_.concurrency_limit);
      observer_.watch_limit("pricing", *limit_);
    }
    if (opts_.policy.observed || opts_.policy.hedging.delay_percentile) tracker_ = std::make_unique<latency_tracker>();
    base_url_ = serving::open_listener(acceptor_, serving::parse_listen_address(opts_.listen), "http");
    port_ = acceptor_.local_endpoint().port();
    listener_ = acceptor_.native_handle();
  }

  void start() {
#if CORETRY_BOOKSTORE_SHARED_STATE
    if (shared_) shared_->start();
#endif
    asio::co_spawn(strand_, accept_loop(shared_from_this()), asio::detached);
  }

  // The budget and the gate of pricing, shared through Redis.
  void share() {
#if CORETRY_BOOKSTORE_SHARED_STATE
    redis::shared_state::options so;
    so.server = redis::parse_url(opts_.shared_state);
    redis::use_credentials(so.server, {opts_.shared_state_user, opts_.shared_state_password});
    so.tls = opts_.shared_state_tls; // the same TLS files type as the HTTP client's
    so.prefix = opts_.shared_state_prefix;
    so.period = opts_.reconcile_period;
    so.on_problem = opts_.on_shared_state_problem;
    shared_ = std::make_unique<redis::shared_state>(io_.get_executor(), std::move(so));
    if (opts_.budget) {
      auto leased = shared_->budget("pricing", {});
      observer_.watch_budget("pricing", *leased);
      budget_ = std::move(leased);
    }
    if (opts_.gate) retry_gate_ = shared_->gate("pricing", opts_.gate_options);
#endif
  }

  std::string metrics() const {
    std::vector<::prometheus::MetricFamily> families = observer_.Collect();
    auto phases = phases_.Collect();
    families.insert(families.end(), std::make_move_iterator(phases.begin()), std::make_move_iterator(phases.end()));
    auto own = metrics_.collect(open_connections_.load());
    families.insert(families.end(), std::make_move_iterator(own.begin()), std::make_move_iterator(own.end()));
    // Figures kept elsewhere (the client's, redis::shared_state's) are copied
    // in as they are when collected: a prometheus-cpp Counter can only be
    // incremented, so it could not mirror them.
    const auto mirrored = [&families](const char* name, ::prometheus::MetricType type, const char* help,
                                      double value, bool of_pricing = false) {
      ::prometheus::ClientMetric sample;
      if (of_pricing) sample.label.push_back({"dependency", "pricing"});
      if (type == ::prometheus::MetricType::Counter) sample.counter.value = value;
      else sample.gauge.value = value;
      families.push_back({name, help, type, {std::move(sample)}});
    };
    const coretry::http::address_stats addresses = client_.addresses();
    mirrored("coretry_address_ejections_total", ::prometheus::MetricType::Counter,
             "Addresses of the dependency taken out of use after failing again and again.",
             static_cast<double>(addresses.ejections), true);
    mirrored("coretry_addresses_ejected", ::prometheus::MetricType::Gauge,
             "Addresses of the dependency out of use now.", static_cast<double>(addresses.ejected), true);
    auto load = address_load_families(addresses, "pricing");
    families.insert(families.end(), std::make_move_iterator(load.begin()), std::make_move_iterator(load.end()));
#if CORETRY_BOOKSTORE_SHARED_STATE
    if (shared_) {
      mirrored("coretry_shared_state_up", ::prometheus::MetricType::Gauge,
               "1 while the budget and gate are shared through Redis, 0 while they are local.", shared_->up() ? 1 : 0);
      mirrored("coretry_shared_state_fallbacks_total", ::prometheus::MetricType::Counter,
               "Times sharing was given up for local state (Redis unreachable, slow, refusing).",
               static_cast<double>(shared_->fallbacks()));
      mirrored("coretry_shared_state_exchanges_total", ::prometheus::MetricType::Counter,
               "Exchanges with Redis that succeeded.", static_cast<double>(shared_->exchanges()));
    }
#endif
    return ::prometheus::TextSerializer{}.Serialize(families);
  }

  void shutdown(std::function<void()> done) {
    asio::dispatch(strand_, [self = shared_from_this(), done = std::move(done)]() mutable {
      if (done) self->done_.push_back(std::move(done));
      if (!self->stopping_.exchange(true)) {
#if CORETRY_BOOKSTORE_SHARED_STATE
        if (self->shared_) self->shared_->stop(); // the budget and gate stay usable, local
#endif
        error_code ignored;
        self->acceptor_.close(ignored);
        self->gate_.close();
        self->grace_timer_.expires_after(self->opts_.shutdown_grace);
        self->grace_timer_.async_wait([self](error_code ec) {
          if (ec) return;
          self->grace_over_.store(true);
          for (auto& [id, c] : self->connections_)
            asio::post(c->strand, [c] {
              if (c->call_pending) c->cancel.emit(asio::cancellation_type::terminal);
            });
        });
      }
      for (auto& [id, c] : self->connections_)
        asio::post(c->strand, [c] {
          error_code ignored;
          if (!c->busy) c->stream.socket().close(ignored); // idle: waiting for a request
          else if (c->call_pending && c->in_backoff) c->cancel.emit(asio::cancellation_type::terminal);
        });
      self->check_done();
    });
  }

  unsigned short port_ = 0;
  std::string base_url_;
  std::atomic<std::size_t> open_connections_{0};

private:
  static coretry::http::client_options client_options_for(const options& o) {
    coretry::http::client_options c;
    c.max_connections_per_origin = o.max_connections;
    c.resolve = o.pricing_resolve;
    c.balance = o.pricing_balance;
    c.ca_file = o.pricing_ca_file;
    return c;
  }

  // On strand_.
  void check_done() {
    if (!stopping_ || !connections_.empty()) return;
    grace_timer_.cancel();
    client_.close_idle();
    auto callbacks = std::move(done_);
    done_.clear();
    for (auto& f : callbacks) f();
  }

  asio::awaitable<void> accept_loop(std::shared_ptr<state> self) {
    while (!stopping_) {
      // At the cap, new connections wait in the listen backlog.
      if (!co_await gate_.wait_for_room() || stopping_) co_return;
      strand_type conn_strand = asio::make_strand(io_);
      auto [error, socket] = co_await acceptor_.async_accept(conn_strand, nothrow_awaitable);
      if (stopping_) co_return;
      if (error) {
        // Out of descriptors and the like: the backlog stays readable, so
        // pause rather than spin.
        metrics_.accept_error();
        if (!co_await gate_.pause_after_accept_error(error)) co_return;
        continue;
      }
      gate_.opened();
      auto c = std::make_shared<connection>(conn_strand, std::move(socket), ++last_id_);
      connections_.emplace(c->id, c);
      ++open_connections_;
      asio::co_spawn(c->strand, session(self, c), asio::detached);
    }
  }

  // Forwards to the shared observer and tracks whether the call sleeps, so
  // that shutdown can cancel sleeps at once. Runs on the connection's strand.
  struct request_observer final : retry_observer {
    request_observer(state& s, std::shared_ptr<connection> c) : server(s), conn(std::move(c)) {}
    void attempt_started(const attempt_started_event& e) noexcept override {
      conn->in_backoff = false;
      server.observer_.attempt_started(e);
    }
    void attempt_finished(const attempt_finished_event& e) noexcept override { server.observer_.attempt_finished(e); }
    void backoff_scheduled(const backoff_event& e) noexcept override {
      conn->in_backoff = true;
      server.observer_.backoff_scheduled(e);
      if (server.stopping_.load()) {
        // Emitted from the strand, after the engine has started its sleep.
        asio::post(conn->strand, [c = conn] {
          if (c->call_pending && c->in_backoff) c->cancel.emit(asio::cancellation_type::terminal);
        });
      }
    }
    void hedge(const hedge_event& e) noexcept override { server.observer_.hedge(e); }
    void permit_waited(const permit_wait_event& e) noexcept override { server.observer_.permit_waited(e); }
    void stopped(const stop_event& e) noexcept override { server.observer_.stopped(e); }
    state& server;
    std::shared_ptr<connection> conn;
  };

  // On the connection's strand: tells the gate (on strand_) when `c` waits
  // for a next request, so that at the cap it may be closed for a new client.
  void set_idle(const std::shared_ptr<connection>& c, bool idle) {
    c->idle = idle;
    asio::dispatch(strand_, [self = shared_from_this(), c, idle] {
      if (!idle) return self->gate_.not_idle(c->id);
      // The closer runs on strand_ and closes on the connection's strand,
      // where `idle` says whether a request began meanwhile.
      self->gate_.idle(c->id, [weak = self->weak_from_this(), c] {
        asio::post(c->strand, [weak, c] {
          const auto self = weak.lock();
          if (!self) return;
          if (!c->idle) return asio::dispatch(self->strand_, [self] { self->gate_.not_closed(); });
          c->idle = false;
          self->metrics_.idle_closed();
          error_code ignored;
          c->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
          c->stream.socket().close(ignored);
        });
      });
    });
  }

  // After a response's last write: true once its bytes have left the socket;
  // else the connection is reset (a reader that does not read).
  asio::awaitable<bool> taken(const std::shared_ptr<connection>& c, steady_clock::time_point deadline) {
    tcp::socket& socket = c->stream.socket();
    const auto give_up = [this](steady_clock::duration stalled) {
      return grace_over_ || (stalled >= serving::longest_stall_when_full &&
                             open_connections_.load() >= opts_.max_clients && serving::clients_waiting(listener_));
    };
    if (co_await serving::wait_until_sent(socket, deadline, give_up)) co_return true;
    if (socket.is_open() && !grace_over_) {
      metrics_.send_timeout();
      serving::reset(socket);
    }
    co_return false;
  }

  asio::awaitable<void> session(std::shared_ptr<state> self, std::shared_ptr<connection> c) {
    const serving::request_limits& limits = opts_.limits;
    beast::flat_buffer buffer = serving::make_buffer(limits);
    const serving::idle_observer on_idle = [this, c](bool idle) { set_idle(c, idle); };
    for (bool first = true; !stopping_; first = false) {
      c->busy = false;
      bhttp::request_parser<bhttp::string_body> parser;
      serving::apply_limits(parser, limits);
      read_outcome outcome = co_await serving::read_request_header(c->stream, buffer, parser, limits, first, on_idle);
      if (outcome == read_outcome::complete)
        outcome = co_await serving::read_request_body(c->stream, buffer, parser, limits);
      if (outcome != read_outcome::complete) {
        if (outcome != read_outcome::closed && !stopping_) {
          metrics_.refused(outcome);
          if (const unsigned status = serving::status_for(outcome)) {
            auto res = reply(2, status, R"({"error":")" + serving::explain(outcome, limits) + R"("})");
            res.keep_alive(false);
            res.set(bhttp::field::server, "coretry-bookstore");
            res.prepare_payload();
            const auto deadline = steady_clock::now() + limits.send_timeout;
            c->stream.expires_at(deadline);
            auto [write_error, written] = co_await bhttp::async_write(c->stream, res, nothrow_awaitable);
            c->stream.expires_never();
            if (!write_error) co_await taken(c, deadline);
          }
        }
        break;
      }
      c->busy = true;
      metrics_.request_started();
      bhttp::response<bhttp::string_body> res = co_await handle(c, parser.get(), steady_clock::now());
      metrics_.request_finished();
      const bool keep = parser.get().keep_alive() && !stopping_;
      res.keep_alive(keep);
      res.set(bhttp::field::server, "coretry-bookstore");
      res.prepare_payload();
      // A client that does not read its response does not hold the
      // connection: the response must have left the socket within the send
      // timeout, and until then no next request is read.
      const auto deadline = steady_clock::now() + limits.send_timeout;
      c->stream.expires_at(deadline);
      auto [write_error, written] = co_await bhttp::async_write(c->stream, res, nothrow_awaitable);
      c->stream.expires_never();
      if (write_error || !co_await taken(c, deadline) || !keep) break;
    }
    c->busy = false;
    error_code ignored;
    c->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    c->stream.close();
    asio::dispatch(strand_, [self, id = c->id] {
      self->gate_.not_idle(id);
      self->connections_.erase(id);
      --self->open_connections_;
      self->gate_.closed();
      self->check_done();
    });
  }

  bhttp::response<bhttp::string_body> reply(std::size_t route, unsigned status, std::string body,
                                            std::string_view content_type = "application/json") {
    metrics_.response(route, status);
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), 11};
    res.set(bhttp::field::content_type, std::string{content_type});
    res.body() = std::move(body);
    return res;
  }

  asio::awaitable<bhttp::response<bhttp::string_body>> handle(std::shared_ptr<connection> c,
                                                               const bhttp::request<bhttp::string_body>& req,
                                                               steady_clock::time_point arrival) {
    const std::string_view target = to_std(req.target());
    const std::string_view path = target.substr(0, target.find('?'));
    if (path == "/metrics") {
      if (req.method() != bhttp::verb::get) co_return reply(1, 405, R"({"error":"method not allowed"})");
      co_return reply(1, 200, metrics(), "text/plain; version=0.0.4; charset=utf-8");
    }
    if (!path.starts_with("/books/")) co_return reply(2, 404, R"({"error":"not found"})");
    const std::string_view id = path.substr(7);
    if (!valid_book_id(id)) co_return reply(0, 404, R"({"error":"no such book"})");
    if (req.method() != bhttp::verb::get) co_return reply(0, 405, R"({"error":"method not allowed"})");

    // The caller's deadline, clamped to ours, less our own reserve.
    milliseconds asked = opts_.max_deadline;
    if (const auto field = req.find(std::string{deadline_header}); field != req.end()) {
      const auto parsed = parse_whole_number(to_std(field->value()));
      if (!parsed)
        co_return reply(0, 400, R"({"error":"x-coretry-deadline-ms must be a whole number of milliseconds"})");
      asked = milliseconds{std::min<std::int64_t>(*parsed, opts_.max_deadline.count())};
    }
    const duration available = asked - opts_.reserve - (steady_clock::now() - arrival);
    const policy& base = opts_.policy;
    if (available < base.min_attempt_allowance + base.completion_reserve || grace_over_) {
      if (!grace_over_) metrics_.deadline_rejection();
      co_return reply(0, grace_over_ ? 503 : 504,
                      grace_over_ ? R"({"error":"shutting down"})" : R"({"error":"too little time left"})");
    }

    coretry::http::request_options ro;
    ro.policy = base;
    ro.policy.overall_deadline = available;
    if (opts_.coordination) {
      unsigned attempt = 1;
      if (const auto field = req.find(std::string{attempt_header}); field != req.end()) {
        const auto parsed = parse_whole_number(to_std(field->value()));
        if (parsed && *parsed > 1) attempt = 2;
      }
      const auto owner = req.find(std::string{retries_header});
      const bool upstream = owner != req.end() && beast::iequals(owner->value(), std::string{retries_owned_upstream});
      if (attempt > 1 || upstream) {
        ro.policy.max_attempts = 1;
        metrics_.single_attempt();
      }
    }
    ro.route = book_route;
    ro.budget = budget_.get();
    ro.gate = retry_gate_.get();
    ro.limit = limit_.get();
    ro.tracker = tracker_.get();
    ro.phases = &phases_;
    request_observer observer{*this, c};
    ro.observer = &observer;
    ro.decorate = [coordination = opts_.coordination](coretry::http::request& out,
                                                      const attempt_context<steady_clock>& context) {
      const auto left = std::chrono::duration_cast<milliseconds>(context.deadline - steady_clock::now());
      out.set(std::string{deadline_header}, std::to_string(std::max<std::int64_t>(left.count(), 0)));
      if (coordination) {
        out.set(std::string{attempt_header}, std::to_string(context.number));
        out.set(std::string{retries_header}, std::string{retries_owned_upstream});
      }
    };

    coretry::http::request out; // the target comes from the URL
    out.method(bhttp::verb::get);
    c->call_pending = true;
    coretry::http::result result;
    try {
      result = co_await client_.async_send(pricing_target(opts_.pricing_url, id), std::move(out), ro,
                                           asio::bind_cancellation_slot(c->cancel.slot(), asio::use_awaitable));
    } catch (const std::exception& e) {
      c->call_pending = false;
      c->cancel.slot().clear();
      co_return reply(0, 500, R"({"error":"internal"})");
    }
    c->call_pending = false;
    c->in_backoff = false;
    c->cancel.slot().clear();

    if (result.succeeded() && result.value && result.value->res) {
      std::string body = R"({"book":")" + std::string{id} + R"(","pricing":)" + result.value->res->body() + "}";
      auto res = reply(0, 200, std::move(body));
      res.set("x-coretry-attempts", std::to_string(result.attempts));
      co_return res;
    }
    const bool timed_out = result.last_error == make_error_code(attempt_error::timed_out);
    const failure_answer answer = answer_for(result.reason, timed_out, !retry_gate_ || retry_gate_->is_open(),
                                             opts_.gate_options.probe_interval);
    auto res = reply(0, answer.status,
                     R"({"error":")" + std::string{to_string(result.reason)} + R"(","attempts":)" +
                         std::to_string(result.attempts) + "}");
    res.set("x-coretry-attempts", std::to_string(result.attempts));
    res.set("x-coretry-stop", std::string{to_string(result.reason)});
    if (answer.retry_after) res.set(bhttp::field::retry_after, std::to_string(answer.retry_after->count()));
    co_return res;
  }

  asio::io_context& io_;
  const options opts_;
  strand_type strand_;
  tcp::acceptor acceptor_;
  int listener_ = -1; // acceptor_'s descriptor, for connections to look at its backlog from their strands
  serving::connection_gate gate_; // on strand_
  asio::steady_timer grace_timer_;
  coretry::http::client client_;
#if CORETRY_BOOKSTORE_SHARED_STATE
  std::unique_ptr<redis::shared_state> shared_;
#endif
  std::shared_ptr<retry_budget> budget_;
  std::shared_ptr<local_gate> retry_gate_; // gate_ is the connection cap's
  std::unique_ptr<latency_tracker> tracker_; // pricing's, with an observed attempt limit or hedge delay
  std::unique_ptr<coretry::concurrency_limit> limit_; // pricing's attempts in flight
  prometheus_observer observer_;
  prometheus_phase_histograms phases_{{std::string{book_route}}}; // pricing's attempts, by phase

  std::atomic<bool> stopping_{false};
  std::atomic<bool> grace_over_{false};
  // On strand_.
  std::uint64_t last_id_ = 0;
  std::map<std::uint64_t, std::shared_ptr<connection>> connections_;
  std::vector<std::function<void()>> done_;

  server_metrics metrics_;
};

server::server(asio::io_context& io, options opts) : state_(std::make_shared<state>(io, std::move(opts))) {
  state_->start();
}

server::~server() { shutdown(); }

unsigned short server::port() const { return state_->port_; }
std::string server::base_url() const { return state_->base_url_; }
std::string server::metrics() const { return state_->metrics(); }
void server::shutdown(std::function<void()> done) { state_->shutdown(std::move(done)); }
std::size_t server::open_connections() const { return state_->open_connections_.load(); }

} // namespace coretry::bookstore
