#include "faults/fault_server.hpp"

#include "faults/fault_script.hpp"
#include "faults/imf_fixdate.hpp"

#include <coretry/http/redact.hpp>
#include <common/quoting.hpp>
#include <serving/listen_address.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <openssl/ssl.h>

#include <sys/socket.h>

#include <cerrno>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cmath>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string_view>
#include <type_traits>

namespace coretry::faults {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using boost::system::error_code;
using tcp = asio::ip::tcp;
using http_request = http::request<http::string_body>;
using tls_stream = asio::ssl::stream<beast::tcp_stream>;
namespace serving = coretry::serving;
using serving::read_outcome;
using coretry::common::quoted;

// Errors come back as values: a failed read or write only ends its connection.
constexpr auto nothrow_awaitable = asio::as_tuple(asio::use_awaitable);

constexpr std::string_view server_name = "coretry-faults";

std::string_view to_std(beast::string_view text) { return {text.data(), text.size()}; }

bool iequals(std::string_view a, std::string_view b) { return beast::iequals(a, b); }

response_plan text_reply(unsigned status, std::string_view text) {
  response_plan plan;
  plan.status = status;
  plan.body = std::string{text} + "\n";
  return plan;
}

response_plan json_reply(const json::value& value) {
  response_plan plan;
  plan.body = json::serialize(value);
  plan.headers.push_back({"Content-Type", "application/json"});
  return plan;
}

json::object echo_json(const http_request& request) {
  json::array headers;
  for (const auto& field : request) {
    headers.push_back(json::object{{"name", to_std(field.name_string())}, {"value", to_std(field.value())}});
  }
  const std::string version = std::to_string(request.version() / 10) + "." + std::to_string(request.version() % 10);
  return json::object{{"method", to_std(request.method_string())},
                      {"target", to_std(request.target())},
                      {"version", version},
                      {"headers", std::move(headers)},
                      {"body", request.body()}};
}

// What the request asked for, independent of its body and headers.
struct exchange {
  unsigned version = 11;
  bool head = false;
  bool keep_alive = false;
};

// Fields that decide where a message ends: once a script overrides them the
// connection's framing cannot be trusted for another request.
bool is_framing_field(std::string_view name) {
  return iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding") || iequals(name, "Connection");
}

// The bytes dripped: recognisable and easy to count.
char drip_byte(std::size_t index) { return static_cast<char>('a' + index % 26); }

bool is_capacity_route(std::string_view path) { return path == "/capacity" || path.starts_with("/capacity/"); }

// What a connection whose request waits for a worker has received meanwhile.
enum class peeked { nothing, data, closed };

// Looks without taking: end of stream (the client closed) or an error (it
// reset) is a client gone; bytes (a pipelined request, a TLS alert) cannot be
// looked past without reading them.
peeked peek_connection(tcp::socket& socket) {
  char byte = 0;
  const auto got = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (got > 0) return peeked::data;
  if (got == 0) return peeked::closed;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return peeked::nothing;
  return peeked::closed;
}

double to_ms(std::chrono::steady_clock::duration duration) {
  return std::round(std::chrono::duration<double, std::milli>(duration).count() * 1000) / 1000;
}

} // namespace

std::optional<std::string> validate(const capacity_options& options) {
  if (options.workers < 1 || options.workers > most_capacity_workers)
    return "capacity workers must be from 1 to " + std::to_string(most_capacity_workers) + ", got " +
           std::to_string(options.workers);
  if (options.service_time < std::chrono::milliseconds::zero() || options.service_time > longest_service_time)
    return "capacity service time must be from 0 to " + std::to_string(longest_service_time.count()) + " ms, got " +
           std::to_string(options.service_time.count());
  if (options.queue_limit > most_capacity_queue)
    return "capacity queue limit must be from 0 to " + std::to_string(most_capacity_queue) + ", got " +
           std::to_string(options.queue_limit);
  return std::nullopt;
}

class fault_server::state : public std::enable_shared_from_this<state> {
public:
  state(asio::io_context& io, fault_server_options options)
      : strand_(asio::make_strand(io)), acceptor_(strand_), gate_(strand_, options.max_clients),
        limits_(options.limits), clock_(options.clock ? std::move(options.clock) : [] {
          return std::chrono::system_clock::now();
        }),
        log_limit_(options.log_limit), sequence_limit_(options.sequence_limit), capacity_(options.capacity),
        capacity_workers_(options.capacity.workers), capacity_timer_(strand_) {
    if (auto problem = serving::validate(limits_)) throw std::invalid_argument(*problem);
    if (auto problem = validate(capacity_)) throw std::invalid_argument(*problem);
    if (options.max_clients == 0) throw std::invalid_argument("max_clients must be at least 1");
    const tcp::endpoint endpoint = serving::parse_listen_address(options.listen);
    if (options.tls) {
      if (!options.pki) options.pki = generate_test_pki();
      tls_.emplace(asio::ssl::context::tls_server);
      SSL_CTX_set_min_proto_version(tls_->native_handle(), TLS1_2_VERSION);
      tls_->use_certificate_chain(asio::buffer(options.pki->cert_pem));
      tls_->use_private_key(asio::buffer(options.pki->key_pem), asio::ssl::context::pem);
      ca_pem_ = options.pki->ca_pem;
      if (!options.client_ca_pem.empty()) {
        tls_->add_certificate_authority(asio::buffer(options.client_ca_pem));
        tls_->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
      }
    } else if (!options.client_ca_pem.empty()) {
      throw std::invalid_argument("client_ca_pem needs tls");
    }
    base_url_ = serving::open_listener(acceptor_, endpoint, tls_ ? "https" : "http");
    port_ = acceptor_.local_endpoint().port();
  }

  void start() { asio::co_spawn(strand_, accept_loop(shared_from_this()), asio::detached); }

  // Runs on the strand.
  void reset_capacity() { reset_capacity_counters(); }

  // Runs on the strand.
  void close_everything() {
    stopping_ = true;
    error_code ignored;
    acceptor_.close(ignored);
    gate_.close();
    // Requests waiting for a worker, or at one, end with their connections.
    capacity_timer_.cancel();
    for (auto* jobs : {&capacity_queue_, &capacity_running_})
      for (capacity_job& job : *jobs)
        if (job.waiter) job.waiter->finished = true;
    capacity_queue_.clear();
    capacity_running_.clear();
    for (auto& [id, live] : connections_) {
      live.timer->cancel();
      live.stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
      live.stream->close();
    }
  }

  std::vector<logged_request> log() const {
    const std::lock_guard lock{mutex_};
    return {log_.begin(), log_.end()};
  }

  std::uint64_t log_dropped() const {
    const std::lock_guard lock{mutex_};
    return log_dropped_;
  }

  void clear() {
    const std::lock_guard lock{mutex_};
    log_.clear();
    log_dropped_ = 0;
    sequence_positions_.clear();
    sequence_order_.clear();
    sequences_evicted_ = 0;
    for (auto& count : refused_) count.store(0);
    send_timeouts_.store(0);
    idle_closed_.store(0);
  }

  fault_server_counters counters() const {
    fault_server_counters out;
    out.header_timeouts = refused(read_outcome::header_timeout);
    out.idle_timeouts = refused(read_outcome::idle_timeout);
    out.header_too_large = refused(read_outcome::header_too_large);
    out.body_too_large = refused(read_outcome::body_too_large);
    out.malformed = refused(read_outcome::malformed);
    out.accept_errors = accept_errors_.load();
    out.send_timeouts = send_timeouts_.load();
    out.idle_closed = idle_closed_.load();
    const std::lock_guard lock{mutex_};
    out.sequences_evicted = sequences_evicted_;
    return out;
  }

  asio::strand<asio::io_context::executor_type> strand_;
  std::string ca_pem_;
  std::string base_url_;
  unsigned short port_ = 0;
  std::atomic<std::size_t> open_connections_{0};

private:
  // The parts of a connection that close_everything() must reach.
  struct connection {
    std::uint64_t id;
    asio::steady_timer timer; // delays and drips, so that stopping cancels them
  };
  struct live_connection {
    beast::tcp_stream* stream;
    asio::steady_timer* timer;
  };

  asio::awaitable<void> accept_loop(std::shared_ptr<state> self) {
    while (!stopping_) {
      // At the cap, new connections wait in the listen backlog.
      if (!co_await gate_.wait_for_room() || stopping_) co_return;
      auto [error, socket] = co_await acceptor_.async_accept(nothrow_awaitable);
      if (stopping_ || error == asio::error::operation_aborted) co_return;
      if (error) {
        // Out of descriptors and the like: the backlog stays readable, so
        // pause rather than spin.
        ++accept_errors_;
        if (!co_await gate_.pause_after_accept_error(error)) co_return;
        continue;
      }
      gate_.opened();
      asio::co_spawn(strand_, run_connection(self, std::move(socket)), asio::detached);
    }
  }

  // `self` keeps the state alive for as long as the connection is.
  asio::awaitable<void> run_connection(std::shared_ptr<state> /*self*/, tcp::socket socket) {
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored); // drips must leave one byte at a time
    if (tls_) {
      tls_stream stream{beast::tcp_stream{std::move(socket)}, *tls_};
      co_await serve(stream);
    } else {
      beast::tcp_stream stream{std::move(socket)};
      co_await serve(stream);
    }
  }

  template <class Stream> asio::awaitable<void> serve(Stream& stream) {
    beast::tcp_stream& lowest = beast::get_lowest_layer(stream);
    connection current{++last_connection_id_, asio::steady_timer{strand_}};
    connections_.emplace(current.id, live_connection{&lowest, &current.timer});
    ++open_connections_;
    struct unregister {
      state& server;
      connection& current;
      beast::tcp_stream& stream;
      ~unregister() {
        server.gate_.not_idle(current.id);
        server.connections_.erase(current.id);
        error_code ignored;
        stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
        stream.close();
        --server.open_connections_;
        server.gate_.closed();
      }
    } const on_exit{*this, current, lowest};

    if (stopping_) co_return;
    try {
      if constexpr (std::is_same_v<Stream, tls_stream>) {
        // The handshake is part of the time allowed for the first header.
        lowest.expires_after(limits_.header_timeout);
        auto [error] = co_await stream.async_handshake(asio::ssl::stream_base::server, nothrow_awaitable);
        lowest.expires_never();
        if (error) co_return;
      }
      co_await serve_requests(stream, current);
    } catch (const std::exception&) {
      // A response that could not be built or sent ends only its connection.
    }
  }

  // Reads requests until the peer or a response ends the connection.
  template <class Stream> asio::awaitable<void> serve_requests(Stream& stream, connection& current) {
    beast::flat_buffer buffer = serving::make_buffer(limits_);
    for (bool first = true; !stopping_; first = false) {
      http::request_parser<http::string_body> parser;
      serving::apply_limits(parser, limits_);
      const read_outcome outcome = co_await read_request(stream, buffer, parser, first, current.id);
      if (stopping_) co_return;
      if (outcome != read_outcome::complete) {
        if (outcome != read_outcome::closed) refused_[static_cast<std::size_t>(outcome)].fetch_add(1);
        if (const unsigned status = serving::status_for(outcome)) {
          co_await perform(stream, current, text_reply(status, serving::explain(outcome, limits_)), exchange{},
                           clock_());
        }
        co_return;
      }
      if (!co_await respond(stream, current, parser.get())) co_return;
    }
  }

  // Answers `Expect: 100-continue` between header and body, so that clients
  // which wait for it are not held up until their own timeout.
  template <class Stream>
  asio::awaitable<read_outcome> read_request(Stream& stream, beast::flat_buffer& buffer,
                                             http::request_parser<http::string_body>& parser, bool first,
                                             std::uint64_t connection_id) {
    // While it waits for a next request, the connection may be closed to
    // admit a new client at the cap. Everything here runs on strand_.
    const serving::idle_observer on_idle = [this, connection_id](bool idle) {
      if (!idle) {
        gate_.not_idle(connection_id);
        return;
      }
      gate_.idle(connection_id, [this, connection_id] {
        const auto found = connections_.find(connection_id);
        if (found == connections_.end()) return gate_.not_closed();
        ++idle_closed_;
        error_code ignored;
        found->second.stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
        found->second.stream->close();
      });
    };
    const read_outcome header =
        co_await serving::read_request_header(stream, buffer, parser, limits_, first, on_idle);
    if (header != read_outcome::complete || parser.is_done()) co_return header;
    if (iequals(to_std(parser.get()[http::field::expect]), "100-continue")) {
      http::response<http::empty_body> go_on{http::status::continue_, parser.get().version()};
      if (auto [write_error, bytes] = co_await http::async_write(stream, go_on, nothrow_awaitable); write_error)
        co_return read_outcome::closed;
    }
    co_return co_await serving::read_request_body(stream, buffer, parser, limits_);
  }

  // Returns whether the connection may carry another request.
  template <class Stream>
  asio::awaitable<bool> respond(Stream& stream, connection& current, const http_request& request) {
    const exchange asked{request.version(), request.method() == http::verb::head, request.keep_alive()};
    const std::string_view target = to_std(request.target());
    if (is_capacity_route(target.substr(0, target.find('?')))) {
      record(request, current.id);
      co_return co_await serve_capacity(stream, current, asked);
    }
    // One reading of the clock for the whole response, so that Date and a
    // Retry-After date are exactly the scripted distance apart.
    const auto now = clock_();
    co_return co_await perform(stream, current, plan_for(request, current.id, now), asked, now);
  }

  // Kept out of the coroutines: GCC 12 miscompiles initializer lists in them.
  response_plan plan_for(const http_request& request, std::uint64_t connection_id,
                         std::chrono::system_clock::time_point now) {
    const std::string_view target = to_std(request.target());
    const auto question = target.find('?');
    const std::string_view path = target.substr(0, question);
    const std::string_view query = question == std::string_view::npos ? std::string_view{} : target.substr(question + 1);

    if (path == "/_log") return json_reply(log_json());
    if (path == "/_reset") {
      clear();
      reset_capacity_counters();
      return json_reply(json::object{{"reset", true}});
    }
    if (path == "/_capacity") return control_capacity(query);
    record(request, connection_id);
    return plan_for(path, query, request, now);
  }

  response_plan plan_for(std::string_view path, std::string_view query, const http_request& request,
                         std::chrono::system_clock::time_point now) {
    try {
      if (path == "/echo") return json_reply(echo_json(request));
      if (path.starts_with("/status/")) {
        response_plan plan = parse_status_script(path.substr(8), query, now);
        // percent=P: this plan for P% of requests, a plain 200 for the rest.
        if (plan.percent < 100 && std::uniform_int_distribution<unsigned>{0, 99}(random_) >= plan.percent)
          return response_plan{};
        return plan;
      }
      if (path.starts_with("/seq/")) {
        const std::string_view name = path.substr(5);
        if (name.empty()) throw script_error("a sequence needs a name: /seq/NAME?steps=...");
        // Parsed before the position advances, so a bad script costs no step.
        std::vector<response_plan> steps = parse_sequence_script(query, now);
        return std::move(steps[std::min(next_position(name), steps.size() - 1)]);
      }
      throw script_error("unknown path " + quoted(path) +
                         "; the paths are /status/CODE, /seq/NAME?steps=..., /capacity/ANYTHING, /echo, /_log, "
                         "/_capacity and /_reset");
    } catch (const script_error& error) {
      return text_reply(400, error.what());
    }
  }

  // The name becomes the most recently used; beyond sequence_limit_ the
  // least recently used name is forgotten.
  std::size_t next_position(std::string_view sequence) {
    const std::lock_guard lock{mutex_};
    auto found = sequence_positions_.find(sequence);
    if (found != sequence_positions_.end()) {
      sequence_order_.splice(sequence_order_.end(), sequence_order_, found->second.used);
      return found->second.next++;
    }
    if (sequence_limit_ == 0) {
      ++sequences_evicted_;
      return 0;
    }
    if (sequence_positions_.size() >= sequence_limit_) {
      sequence_positions_.erase(sequence_positions_.find(sequence_order_.front()));
      sequence_order_.pop_front();
      ++sequences_evicted_;
    }
    found = sequence_positions_.emplace(std::string{sequence}, sequence_state{}).first;
    found->second.used = sequence_order_.insert(sequence_order_.end(), found->first);
    return found->second.next++;
  }

  std::uint64_t refused(read_outcome outcome) const { return refused_[static_cast<std::size_t>(outcome)].load(); }

  void record(const http_request& request, std::uint64_t connection_id) {
    logged_request entry{std::string{to_std(request.method_string())},
                         std::string{to_std(request.target())},
                         std::chrono::steady_clock::now() - started_,
                         std::nullopt,
                         request.body().size(),
                         connection_id,
                         {}};
    if (const auto key = request.find("Idempotency-Key"); key != request.end())
      entry.idempotency_key = std::string{to_std(key->value())};
    for (const auto& field : request) {
      const std::string_view name = to_std(field.name_string());
      entry.fields.emplace_back(name, coretry::http::is_sensitive_header(name) ? std::string_view{"[redacted]"}
                                                                               : to_std(field.value()));
    }
    const std::lock_guard lock{mutex_};
    if (log_.size() == log_limit_) {
      ++log_dropped_;
      if (log_.empty()) return;
      log_.pop_front();
    }
    log_.push_back(std::move(entry));
  }

  json::object log_json() const {
    json::array requests;
    for (const logged_request& entry : log()) {
      json::value key = nullptr;
      if (entry.idempotency_key) key = *entry.idempotency_key;
      const auto received_ms = std::chrono::duration_cast<std::chrono::milliseconds>(entry.received).count();
      requests.push_back(json::object{{"method", entry.method},
                                      {"target", entry.target},
                                      {"received_ms", received_ms},
                                      {"idempotency_key", std::move(key)},
                                      {"body_length", entry.body_length},
                                      {"connection", entry.connection}});
    }
    const fault_server_counters counted = counters();
    json::object refusals{{"header_timeout", counted.header_timeouts},
                          {"idle_timeout", counted.idle_timeouts},
                          {"header_too_large", counted.header_too_large},
                          {"body_too_large", counted.body_too_large},
                          {"malformed", counted.malformed},
                          {"accept_errors", counted.accept_errors},
                          {"send_timeout", counted.send_timeouts},
                          {"idle_closed_at_cap", counted.idle_closed}};
    return json::object{{"requests", std::move(requests)},
                        {"dropped", log_dropped()},
                        {"sequences_evicted", counted.sequences_evicted},
                        {"refused", std::move(refusals)}};
  }

  // Waits unless the server stops meanwhile; returns whether to go on.
  asio::awaitable<bool> pause(connection& current, std::chrono::milliseconds duration) {
    if (stopping_) co_return false;
    if (duration.count() == 0) co_return true;
    current.timer.expires_after(duration);
    auto [error] = co_await current.timer.async_wait(nothrow_awaitable);
    co_return !error && !stopping_;
  }

  // Carries out `plan`; returns whether the connection may carry another
  // request. `taken`, if given, is set once the response has left the socket.
  template <class Stream>
  asio::awaitable<bool> perform(Stream& stream, connection& current, const response_plan& plan, exchange asked,
                                std::chrono::system_clock::time_point now, bool* taken = nullptr) {
    if (!co_await pause(current, plan.delay)) co_return false;
    tcp::socket& socket = beast::get_lowest_layer(stream).socket();
    if (plan.fate == response_fate::close) co_return false;
    if (plan.fate == response_fate::reset) {
      // A zero linger time makes close() send RST instead of FIN.
      error_code ignored;
      socket.set_option(asio::socket_base::linger(true, 0), ignored);
      socket.close(ignored);
      co_return false;
    }

    std::string body;
    if (plan.body) body = *plan.body;
    else if (status_has_body(plan.status)) body = R"({"status":)" + std::to_string(plan.status) + "}";
    std::size_t announced_length = body.size();
    if (plan.fate == response_fate::drip) announced_length = plan.drip_bytes;
    // A hang must leave the client waiting for at least one byte.
    if (plan.fate == response_fate::hang_after_headers) announced_length = std::max<std::size_t>(body.size(), 1);

    bool keep_alive = asked.keep_alive &&
                      (plan.fate == response_fate::complete || plan.fate == response_fate::drip) &&
                      std::none_of(plan.headers.begin(), plan.headers.end(),
                                   [](const header_field& field) { return is_framing_field(field.name); });

    http::response<http::string_body> response;
    response.version(asked.version);
    response.result(plan.status);
    if (http::int_to_status(plan.status) == http::status::unknown) response.reason("Unassigned");
    response.set(http::field::date, format_imf_fixdate(now));
    response.set(http::field::server, server_name);
    if (status_has_body(plan.status)) {
      const bool json_body = !plan.body && plan.fate != response_fate::drip;
      response.set(http::field::content_type, json_body ? "application/json" : "text/plain; charset=utf-8");
      response.content_length(announced_length);
    }
    response.keep_alive(keep_alive);
    // A scripted field replaces the server's own field of that name.
    for (const header_field& field : plan.headers) response.erase(field.name);
    for (const header_field& field : plan.headers) response.insert(field.name, field.value);
    if (plan.fate == response_fate::complete && !asked.head) response.body() = std::move(body);

    if (stopping_) co_return false;
    // A client that does not take its response within the send timeout does
    // not hold the connection (a drip's bytes are each bounded alike).
    beast::tcp_stream& lowest = beast::get_lowest_layer(stream);
    auto sent_by = std::chrono::steady_clock::now() + limits_.send_timeout;
    lowest.expires_at(sent_by);
    auto [write_error, written] = co_await http::async_write(stream, response, nothrow_awaitable);
    lowest.expires_never();
    if (write_error) co_return false;

    if (plan.fate == response_fate::drip && !asked.head) {
      for (std::size_t index = 0; index < plan.drip_bytes; ++index) {
        if (!co_await pause(current, plan.drip_interval)) co_return false;
        const char byte = drip_byte(index);
        sent_by = std::chrono::steady_clock::now() + limits_.send_timeout;
        lowest.expires_at(sent_by);
        auto [error, bytes] = co_await asio::async_write(stream, asio::buffer(&byte, 1), nothrow_awaitable);
        lowest.expires_never();
        if (error) co_return false;
      }
    }
    if (plan.fate == response_fate::hang_after_headers) {
      // Silent until the client gives up or the server stops (which closes the socket).
      std::array<char, 1024> discarded;
      while (!stopping_) {
        auto [error, bytes] = co_await stream.async_read_some(asio::buffer(discarded), nothrow_awaitable);
        if (error) break;
      }
      co_return false;
    }
    // Taken only once the bytes have left the socket: until then no next
    // request is read and the connection is not idle.
    const auto give_up = [this](std::chrono::steady_clock::duration stalled) {
      return stopping_ || (stalled >= serving::longest_stall_when_full && gate_.open() >= gate_.max_open() &&
                           serving::clients_waiting(acceptor_.native_handle()));
    };
    if (!co_await serving::wait_until_sent(socket, sent_by, give_up)) {
      if (!stopping_ && socket.is_open()) {
        ++send_timeouts_;
        serving::reset(socket);
      }
      co_return false;
    }
    if (taken) *taken = true;
    co_return keep_alive && !stopping_;
  }

  // The capacity route (capacity_options). Everything here runs on strand_.
  //
  // A request waits in capacity_queue_ (FIFO) until a worker is free, then
  // sits in capacity_running_ for the service time. Every job starts its
  // service in queue order and all take the same time, so they finish in
  // the order they started: one timer, armed for the oldest running job,
  // serves them all. A job outlives its connection: once the client has gone
  // (its waiter detached) the job still takes its turn and its worker, and
  // its work is counted as wasted when it finishes.
  struct capacity_waiter {
    tcp::socket* socket;
    asio::steady_timer* timer;
    bool finished = false;      // the work is done (or the server stops): answer
    std::uint64_t started = 0;  // the job's place in service order, 1 for the first
    std::chrono::steady_clock::duration queued{}; // from admission to a worker
  };
  struct capacity_job {
    capacity_waiter* waiter; // null once the client has gone
    std::chrono::steady_clock::time_point admitted;
    std::chrono::steady_clock::time_point started{};
  };

  template <class Stream> asio::awaitable<bool> serve_capacity(Stream& stream, connection& current, exchange asked) {
    if (stopping_) co_return false;
    if (capacity_running_.size() >= capacity_workers_ && capacity_queue_.size() >= capacity_.queue_limit) {
      ++capacity_rejected_;
      co_return co_await perform(stream, current,
                                 text_reply(503, "capacity queue full: " + std::to_string(capacity_queue_.size()) +
                                                     " requests wait for " + std::to_string(capacity_workers_) +
                                                     " workers"),
                                 asked, clock_());
    }
    tcp::socket& socket = beast::get_lowest_layer(stream).socket();
    capacity_waiter waiter{&socket, &current.timer};
    const auto job = capacity_queue_.insert(capacity_queue_.end(),
                                            capacity_job{&waiter, std::chrono::steady_clock::now()});
    ++capacity_admitted_;
    dispatch_capacity();

    // Until its work is done, watch whether the client is still there: the
    // socket's readability wakes us for end of stream or a reset; bytes of a
    // pipelined request (or a TLS alert) end the watch, since they cannot be
    // looked past without reading them. The job's end cancels the wait.
    bool watching = true;
    while (!waiter.finished) {
      bool gone = false;
      if (watching) {
        auto [error] = co_await socket.async_wait(tcp::socket::wait_read, nothrow_awaitable);
        if (waiter.finished) break;
        if (stopping_ || (error && error != asio::error::operation_aborted)) {
          gone = true;
        } else if (!error) {
          const peeked seen = peek_connection(socket);
          gone = seen == peeked::closed;
          watching = seen == peeked::nothing;
        }
      } else {
        current.timer.expires_at(asio::steady_timer::time_point::max());
        co_await current.timer.async_wait(nothrow_awaitable);
        if (waiter.finished) break;
        gone = stopping_;
      }
      if (gone) {
        if (!stopping_) {
          job->waiter = nullptr; // its work goes on, for nobody
          ++capacity_abandoned_pending_;
        }
        co_return false;
      }
    }
    if (stopping_) co_return false;

    response_plan plan;
    plan.headers.push_back({"X-Capacity-Queued-Ms", std::to_string(to_ms(waiter.queued))});
    plan.headers.push_back({"X-Capacity-Start", std::to_string(waiter.started)});
    bool taken = false;
    const bool keep = co_await perform(stream, current, plan, asked, clock_(), &taken);
    if (stopping_) co_return false;
    // The work was done, but its answer did not reach the client: wasted too.
    if (taken) ++capacity_served_;
    else ++capacity_wasted_;
    co_return keep;
  }

  // The oldest waiting job goes to a worker from `at` on (now, or in the
  // past: see finish_capacity_work).
  void start_capacity_job(std::chrono::steady_clock::time_point at) {
    const auto job = capacity_queue_.begin();
    job->started = at;
    ++capacity_started_;
    if (job->waiter) {
      job->waiter->started = capacity_started_;
      job->waiter->queued = at - job->admitted;
    }
    // capacity_running_ stays in order of start, hence of end.
    auto place = capacity_running_.end();
    while (place != capacity_running_.begin() && std::prev(place)->started > at) --place;
    capacity_running_.splice(place, capacity_queue_, job);
  }

  // Gives free workers the oldest waiting jobs.
  void dispatch_capacity() {
    const auto now = std::chrono::steady_clock::now();
    while (capacity_running_.size() < capacity_workers_ && !capacity_queue_.empty()) start_capacity_job(now);
    capacity_high_water_ = std::max(capacity_high_water_, capacity_queue_.size());
    if (capacity_timer_armed_ || capacity_running_.empty() || stopping_) return;
    capacity_timer_armed_ = true;
    capacity_timer_.expires_at(capacity_running_.front().started + capacity_.service_time);
    capacity_timer_.async_wait([self = shared_from_this()](const error_code& error) {
      self->capacity_timer_armed_ = false;
      if (!error && !self->stopping_) self->finish_capacity_work();
    });
  }

  // The jobs whose service time is over leave their workers. Workers keep
  // to the clock, not to the timer that tells of them: a worker freed at its
  // job's end takes the next waiting job from that moment on, even when the
  // timer fires late (a busy machine), so that the capacity stays workers /
  // service time. Only the answers leave as late as the timer.
  void finish_capacity_work() {
    const auto now = std::chrono::steady_clock::now();
    while (!capacity_running_.empty() && capacity_running_.front().started + capacity_.service_time <= now) {
      capacity_job& job = capacity_running_.front();
      const auto end = job.started + capacity_.service_time;
      capacity_busy_ += std::max(end - std::max(job.started, capacity_since_), std::chrono::steady_clock::duration{});
      ++capacity_completed_;
      if (job.waiter) {
        job.waiter->finished = true;
        error_code ignored;
        job.waiter->socket->cancel(ignored); // ends the watch
        job.waiter->timer->cancel();
      } else {
        ++capacity_wasted_;
        --capacity_abandoned_pending_;
      }
      capacity_running_.pop_front();
      if (capacity_running_.size() < capacity_workers_ && !capacity_queue_.empty())
        start_capacity_job(std::max(end, capacity_queue_.front().admitted));
    }
    dispatch_capacity();
  }

  void reset_capacity_counters() {
    capacity_admitted_ = capacity_rejected_ = capacity_completed_ = capacity_served_ = capacity_wasted_ = 0;
    capacity_busy_ = {};
    capacity_high_water_ = capacity_queue_.size();
    capacity_since_ = std::chrono::steady_clock::now(); // running work counts from here
  }

  // /_capacity[?workers=N]: sets the number of workers if asked, then
  // reports. Growing starts waiting jobs at once; shrinking lets running
  // work finish.
  response_plan control_capacity(std::string_view query) {
    if (!query.empty()) {
      constexpr std::string_view name = "workers=";
      const std::string_view value = query.starts_with(name) ? query.substr(name.size()) : std::string_view{};
      std::size_t workers = 0;
      const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), workers);
      if (!query.starts_with(name))
        return text_reply(400, "/_capacity takes one option, workers=N (1 to " +
                                   std::to_string(most_capacity_workers) + "), got " + quoted(query));
      if (value.empty() || error != std::errc{} || end != value.data() + value.size() || workers < 1 ||
          workers > most_capacity_workers)
        return text_reply(400, "workers must be a whole number from 1 to " + std::to_string(most_capacity_workers) +
                                   ", got " + quoted(value));
      capacity_workers_ = workers;
      dispatch_capacity();
    }
    return json_reply(capacity_json());
  }

  json::object capacity_json() const {
    const auto now = std::chrono::steady_clock::now();
    auto busy = capacity_busy_;
    for (const capacity_job& job : capacity_running_)
      busy += std::clamp<std::chrono::steady_clock::duration>(now - std::max(job.started, capacity_since_), {},
                                                               capacity_.service_time);
    return json::object{{"workers", capacity_workers_},
                        {"service_ms", capacity_.service_time.count()},
                        {"queue_limit", capacity_.queue_limit},
                        {"queue_length", capacity_queue_.size()},
                        {"queue_high_water", capacity_high_water_},
                        {"busy_workers", capacity_running_.size()},
                        {"admitted", capacity_admitted_},
                        {"rejected", capacity_rejected_},
                        {"completed", capacity_completed_},
                        {"served", capacity_served_},
                        {"wasted", capacity_wasted_},
                        {"abandoned_pending", capacity_abandoned_pending_},
                        {"busy_ms", to_ms(busy)},
                        {"since_ms", to_ms(now - capacity_since_)}};
  }

  tcp::acceptor acceptor_;
  serving::connection_gate gate_; // on strand_
  const serving::request_limits limits_;
  const std::function<std::chrono::system_clock::time_point()> clock_;
  std::array<std::atomic<std::uint64_t>, 8> refused_{}; // by read_outcome
  std::atomic<std::uint64_t> accept_errors_{0};
  std::atomic<std::uint64_t> send_timeouts_{0};
  std::atomic<std::uint64_t> idle_closed_{0};
  std::optional<asio::ssl::context> tls_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();

  // Touched only on strand_.
  bool stopping_ = false;
  std::uint64_t last_connection_id_ = 0;
  std::map<std::uint64_t, live_connection> connections_;
  std::mt19937 random_{std::random_device{}()}; // for percent=P

  const std::size_t log_limit_;
  const std::size_t sequence_limit_;
  struct sequence_state {
    std::size_t next = 0;
    std::list<std::string_view>::iterator used; // its place in sequence_order_
  };
  mutable std::mutex mutex_;
  std::deque<logged_request> log_;                                      // guarded by mutex_
  std::uint64_t log_dropped_ = 0;                                       // guarded by mutex_
  std::map<std::string, sequence_state, std::less<>> sequence_positions_; // guarded by mutex_
  std::list<std::string_view> sequence_order_; // names in sequence_positions_, least recently used first; guarded by mutex_
  std::uint64_t sequences_evicted_ = 0;        // guarded by mutex_

  // The capacity route's state, touched only on strand_.
  const capacity_options capacity_;
  std::size_t capacity_workers_;
  asio::steady_timer capacity_timer_; // the oldest running job's end
  bool capacity_timer_armed_ = false;
  std::list<capacity_job> capacity_queue_;   // waiting, oldest first; at most queue_limit
  std::list<capacity_job> capacity_running_; // at workers, oldest first
  std::size_t capacity_high_water_ = 0;      // of capacity_queue_.size()
  std::uint64_t capacity_started_ = 0;       // jobs given a worker, ever (their service order)
  std::uint64_t capacity_admitted_ = 0;      // the counters below since the start or /_reset
  std::uint64_t capacity_rejected_ = 0;
  std::uint64_t capacity_completed_ = 0;
  std::uint64_t capacity_served_ = 0;
  std::uint64_t capacity_wasted_ = 0;
  std::uint64_t capacity_abandoned_pending_ = 0; // jobs whose client has gone, their work not yet done
  std::chrono::steady_clock::duration capacity_busy_{};
  std::chrono::steady_clock::time_point capacity_since_ = std::chrono::steady_clock::now();
};

fault_server::fault_server(boost::asio::io_context& io, fault_server_options options)
    : state_(std::make_shared<state>(io, std::move(options))) {
  state_->start();
}

fault_server::~fault_server() { stop(); }

unsigned short fault_server::port() const { return state_->port_; }

std::string fault_server::base_url() const { return state_->base_url_; }

const std::string& fault_server::ca_certificate_pem() const { return state_->ca_pem_; }

void fault_server::stop() {
  boost::asio::dispatch(state_->strand_, [state = state_] { state->close_everything(); });
}

std::size_t fault_server::open_connections() const { return state_->open_connections_.load(); }

std::vector<logged_request> fault_server::log() const { return state_->log(); }

std::uint64_t fault_server::log_dropped() const { return state_->log_dropped(); }

void fault_server::clear() {
  state_->clear();
  boost::asio::dispatch(state_->strand_, [state = state_] { state->reset_capacity(); });
}

fault_server_counters fault_server::counters() const { return state_->counters(); }

} // namespace coretry::faults
