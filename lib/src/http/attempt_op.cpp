// One attempt of a request, as a composed operation: lease a connection
// (waiting for one when the origin has none to spare), connect when the lease
// brings none, write the request, read its response one bounded read at a
// time, give the connection back. Its state is one block, from the handler's
// allocator (from the thread's block cache when the handler names none),
// freed before the handler runs; every step runs on the handler's executor
// and the last one calls the handler in place (beast::async_base). Only a
// new connection's setup is a coroutine (establish): reusing a pooled
// connection, the usual case, costs no frame.
//
// Every failure is recorded in the exchange, with how far the attempt got,
// so that the classifier can tell "never sent" from "outcome unknown". A
// cancellation that arrives between two steps is kept (a cancellation_state
// between the handler's slot and the inner operations) and looked at before
// each step: Beast's http::async_read (Boost 1.81) starts its next read
// without looking, so the response is read here one read_some at a time.

#include <coretry/http/client.hpp>

#include <coretry/detail/block_cache.hpp>
#include <coretry/with_deadline.hpp>

#include "attempt_op.hpp"
#include "client_state.hpp"
#include "prepare.hpp"
#include "request_head.hpp"
#include "response_reading.hpp"

#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/async_base.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <optional>
#include <span>
#include <string>
#include <variant>

namespace coretry::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace beast_http = boost::beast::http;
using boost::system::error_code;

namespace detail {

bool closed_by_peer(const error_code& ec) {
  return ec == asio::error::eof || ec == beast_http::error::end_of_stream || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::ssl::error::stream_truncated;
}

namespace {

using clock = phase_timings::clock;
using attempt_handler = asio::any_completion_handler<void(std::exception_ptr, exchange)>;

/// The most room a connection keeps for the next request's head.
constexpr std::size_t max_kept_head = 16 * 1024;

/// Ends the attempt's last phase and tells the request's phase observer.
void end_phases(exchange& x, const prepared_request& prepared, unsigned attempt) {
  if (x.phases.running()) x.phases.finish(clock::now());
  if (prepared.phases)
    prepared.phases->attempt_phases({prepared.route, attempt, x.phases, x.reused_connection, x.res.has_value()});
}

/// What one attempt keeps from its start to its end: one block.
struct attempt_state {
  attempt_state(std::shared_ptr<client_state> s, std::shared_ptr<const prepared_request> p,
                attempt_context<std::chrono::steady_clock> c, asio::cancellation_slot parent)
      : state(std::move(s)), prepared(std::move(p)), context(c), parent(parent), cancel(parent) {}

  std::shared_ptr<client_state> state;
  std::shared_ptr<const prepared_request> prepared;
  attempt_context<std::chrono::steady_clock> context;
  /// The handler's slot, which `cancel` is installed in.
  asio::cancellation_slot parent;
  /// Between the handler's slot and the inner operations: remembers a
  /// cancellation that came while none was running.
  asio::cancellation_state cancel;
  exchange x;
  /// The attempt's own copy of the request, when its body is reopened or a
  /// decorator changes it; `req` is what is sent.
  std::optional<request> per_attempt;
  const request* req = nullptr;
  name_and_port target;
  /// The addresses this operation's earlier attempts (and hedges) used: a
  /// connection to another is preferred when there is one.
  std::array<asio::ip::tcp::endpoint, used_addresses::capacity> used_list;
  std::span<const asio::ip::tcp::endpoint> avoid;
  clock::time_point lease_at; ///< the time leases are judged at
  std::optional<lease> held;
  std::optional<connect_context> setup;
  std::optional<beast_http::response_parser<streamed_body>> parser;
  unsigned interim = 0;      ///< interim responses skipped so far
  bool answered = false;     ///< a byte of a response arrived
  bool keep_alive = false;   ///< the connection may carry another request
  /// What an attempt that ended inside its initiating call threw, until the
  /// post that reports it runs.
  std::exception_ptr failure;

  bool cancelled() const { return cancellation_requested(cancel); }
  connection& conn() const { return *held->get(); }
  const client_options& options() const { return state->options; }
};

/// A new connection's setup within client_options::connect_timeout (and the
/// attempt's deadline, which reaches it as cancellation).
asio::awaitable<error_code> connect_within(attempt_state& s, asio::any_io_executor ex) {
  co_await asio::this_coro::throw_if_cancelled(false);
  auto connecting = establish(s.prepared->where, *s.setup, s.avoid, *s.held, s.x);
  if (s.options().connect_timeout == duration::zero()) co_return co_await std::move(connecting);
  auto done = co_await async_with_deadline<error_code>(
      ex, instant_after(asio::steady_timer::clock_type::now(), s.options().connect_timeout), std::move(connecting),
      asio::use_awaitable);
  if (done.exception) std::rethrow_exception(done.exception);
  co_return done.error == attempt_error::timed_out ? error_code(asio::error::timed_out)
                                                   : done.error ? done.error : *done.value;
}

class attempt_op : public beast::async_base<attempt_handler, asio::any_io_executor> {
  using base = beast::async_base<attempt_handler, asio::any_io_executor>;
  using block_cache = coretry::detail::block_cache;
  using state_allocator = std::allocator_traits<
      asio::associated_allocator_t<attempt_handler>>::template rebind_alloc<attempt_state>;
  static_assert(alignof(attempt_state) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);

public:
  /// Every step runs here (the handler's executor); inner operations
  /// complete here.
  using executor_type = asio::any_io_executor;
  executor_type get_executor() const noexcept { return ex_; }
  /// Inner operations hear cancellation through the attempt's own state.
  using cancellation_slot_type = asio::cancellation_slot;
  cancellation_slot_type get_cancellation_slot() const noexcept { return s_->cancel.slot(); }

  attempt_op(attempt_handler handler, asio::any_io_executor ex, asio::cancellation_slot slot, bool default_allocator,
             std::shared_ptr<client_state> state, std::shared_ptr<const prepared_request> prepared,
             attempt_context<std::chrono::steady_clock> context)
      : base(std::move(handler), ex), ex_(std::move(ex)), own_block_(default_allocator) {
    void* block = own_block_ ? block_cache::allocate(sizeof(attempt_state)) : handler_allocator().allocate(1);
    try {
      s_ = ::new (block) attempt_state(std::move(state), std::move(prepared), context, slot);
    } catch (...) {
      deallocate(block);
      throw;
    }
  }

  attempt_op(attempt_op&& other) noexcept
      : base(std::move(other)), ex_(std::move(other.ex_)), s_(std::exchange(other.s_, nullptr)),
        own_block_(other.own_block_), step_(other.step_) {}
  attempt_op& operator=(attempt_op&&) = delete;

  /// Destroyed unfinished (its execution context went away): the state goes
  /// with it, the connection back to its pool.
  ~attempt_op() {
    if (s_) free_state();
  }

  /// Each step runs guarded: an exception thrown before the step handed the
  /// operation on ends the attempt with that exception, as an awaitable's
  /// would; the handler is never lost.
  void start() {
    guarded(false, [this] { begin(); });
  }

  /// A pool waiter woken (or cancelled).
  void operator()(error_code ec) {
    guarded(true, [&] { woken(ec); });
  }

  /// The setup of a new connection ended.
  void operator()(std::exception_ptr e, error_code ec) {
    guarded(true, [&] { set_up(e, ec); });
  }

  /// The request written, or one read of the response done.
  void operator()(error_code ec, std::size_t n) {
    guarded(true, [&] {
      if (step_ == step::writing) written(ec, n);
      else got(ec, n);
    });
  }

  /// One read of the response within the idle limit.
  void operator()(deadline_outcome<std::size_t> done) {
    guarded(true, [&] {
      if (done.exception) return fail(true, done.exception);
      const error_code ec = done.error == attempt_error::timed_out ? error_code(asio::error::timed_out) : done.error;
      got(ec, done.value ? *done.value : 0);
    });
  }

  /// Back from the post that keeps an early end from completing inside the
  /// initiating call.
  void operator()() {
    guarded(true, [this] {
      if (s_->failure) fail(true, std::exchange(s_->failure, nullptr));
      else finish(true);
    });
  }

private:
  enum class step { starting, writing, reading };

  /// A system_error is the attempt's error (an I/O failure, or a callback
  /// that reports one), anything else a programming error the attempt ends
  /// with, as with the awaitable it replaced.
  template <class Step>
  void guarded(bool cont, Step&& step) {
    try {
      step();
    } catch (...) {
      // Thrown after the operation was handed on (to an inner operation
      // whose start failed, or to the caller's handler, which threw): it
      // goes on to whoever runs this, as any handler's exception does.
      if (!s_) throw;
      try {
        throw;
      } catch (const boost::system::system_error& e) {
        s_->x.error = e.code();
        finish(cont);
      } catch (...) {
        fail(cont, std::current_exception());
      }
    }
  }

  void begin() {
    attempt_state& s = *s_;
    const prepared_request& prepared = *s.prepared;
    exchange& x = s.x;
    if (prepared.where.proxy) x.proxy = prepared.where.proxy->shown;
    if (const auto key = prepared.req.find("Idempotency-Key"); key != prepared.req.end())
      x.idempotency_key = std::string(key->value());
    s.req = &prepared.req;
    if ((prepared.body || prepared.decorate) && !per_attempt_request()) return finish(false);
    s.target = connection_target(prepared.where);
    s.avoid = std::span<const asio::ip::tcp::endpoint>(s.used_list.data(), prepared.used.copy(s.used_list));
    lease(false);
  }

  void woken(error_code ec) {
    attempt_state& s = *s_;
    if (ec) {
      s.x.error = ec;
      return finish(true);
    }
    s.lease_at = clock::now();
    if (try_lease()) return leased(true);
    wait_for_connection(true);
  }

  void set_up(std::exception_ptr e, error_code ec) {
    attempt_state& s = *s_;
    if (e) std::rethrow_exception(e);
    if (ec) {
      s.x.error = ec; // the lease closes whatever was opened
      return finish(true);
    }
    connected(true);
  }

  /// Makes the attempt's own copy of the request (body reopened, decorator
  /// applied); false when it must not be sent, with the problem recorded.
  bool per_attempt_request() {
    attempt_state& s = *s_;
    const prepared_request& prepared = *s.prepared;
    std::optional<std::string> body;
    if (prepared.body) {
      // A streamed body is reopened for every attempt, never resent consumed.
      body = prepared.body(s.context.number);
      if (!body) {
        s.x.problem = "the request body cannot be reproduced for attempt " + std::to_string(s.context.number);
        return false;
      }
    }
    // The copy is the request as it will be sent: a decorator (one that
    // signs the request, say) sees the target, Host and User-Agent.
    request& copy = s.per_attempt.emplace(prepared.req);
    if (copy.target().empty()) copy.target(prepared.target);
    if (copy.find(beast_http::field::host) == copy.end()) copy.set(beast_http::field::host, prepared.names->host);
    const std::string& user_agent = s.options().user_agent;
    if (!user_agent.empty() && copy.find(beast_http::field::user_agent) == copy.end())
      copy.set(beast_http::field::user_agent, user_agent);
    if (body) {
      copy.body() = std::move(*body);
      copy.prepare_payload();
    }
    if (prepared.decorate) prepared.decorate(copy, s.context);
    s.req = &*s.per_attempt;
    if (auto problem = request_problem(*s.per_attempt)) {
      s.x.problem = "after the request decorator: " + *problem;
      return false;
    }
    return true;
  }

  bool try_lease() {
    attempt_state& s = *s_;
    auto got = s.state->pool.try_lease(*s.prepared->where.key, [&s](const connection& c) {
      return s.state->health.suits(s.target, c.peer, s.avoid, s.lease_at);
    });
    if (!got) return false;
    s.held.emplace(std::move(*got));
    return true;
  }

  void lease(bool cont) {
    attempt_state& s = *s_;
    // One clock read per change of phase: this one starts the wait for a
    // connection; each later phase's start ends the one before.
    s.lease_at = clock::now();
    s.x.phases.enter(phase::pool_wait, s.lease_at);
    if (try_lease()) return leased(cont);
    wait_for_connection(cont);
  }

  void wait_for_connection(bool cont) {
    attempt_state& s = *s_;
    if (s.cancelled()) {
      s.x.error = asio::error::operation_aborted;
      return finish(cont);
    }
    step_ = step::starting;
    // The attempt's deadline goes with it: a waiter that can no longer fit
    // an exchange is refused (pool_error::too_late) rather than woken.
    s.state->pool.async_wait_for_release(*s.prepared->where.key, s.context.deadline, std::move(*this));
  }

  void leased(bool cont) {
    attempt_state& s = *s_;
    if (const connection* c = s.held->get()) {
      s.x.reused_connection = true;
      s.x.address = c->peer;
      return connected(cont);
    }
    // The read buffer's bound is what limits a chunk-size line, its
    // extensions and the trailers: Beast 1.81's parser waits for a whole
    // line however long it is.
    // A cancellation that came while no operation ran (between the pool's
    // wake-up and this step) would not reach the setup's own state.
    if (s.cancelled()) {
      s.x.error = asio::error::operation_aborted;
      return finish(cont);
    }
    client_state& c = *s.state;
    s.setup.emplace(connect_context{c.tls, c.pool, c.health,
                                    std::size_t{c.options.header_limit} + c.options.line_limit,
                                    c.options.header_limit, c.options.connection_attempt_delay});
    step_ = step::starting;
    asio::co_spawn(ex_, connect_within(s, ex_), std::move(*this));
  }

  void connected(bool cont) {
    attempt_state& s = *s_;
    s.prepared->used.add(*s.x.address);
    s.x.reached = stage::writing;
    s.x.phases.enter(phase::write, clock::now());
    if (s.cancelled()) {
      s.x.error = asio::error::operation_aborted;
      return after_exchange(cont);
    }
    connection& conn = s.conn();
    write_request_head(conn.head, *s.req,
                       {s.prepared->target, s.prepared->names->host, s.state->options.user_agent});
    step_ = step::writing;
    std::visit(
        [this, &s, &conn](auto& stream) {
          asio::async_write(stream, request_buffers(conn.head, *s.req), std::move(*this));
        },
        conn.stream);
  }

  void written(error_code ec, std::size_t n) {
    attempt_state& s = *s_;
    s.x.bytes_written = n;
    // A large head's room is not kept with an idle connection.
    if (std::string& head = s.conn().head; head.capacity() > max_kept_head) std::string().swap(head);
    if (ec) {
      s.x.error = ec;
      return after_exchange(true);
    }
    s.x.reached = stage::reading;
    s.x.phases.enter(phase::first_byte, clock::now());
    next_response(true);
  }

  /// Interim responses (100 Continue, 103 Early Hints) come before the final
  /// one (RFC 9110 §15.2): each is read with a fresh parser and skipped, up
  /// to a bound: a server sending them forever would hold the attempt to its
  /// end.
  void next_response(bool cont) {
    attempt_state& s = *s_;
    const client_options& options = s.options();
    if (s.interim > options.max_interim_responses) {
      s.x.error = response_error::too_many_interim_responses;
      return after_exchange(cont);
    }
    auto& parser = s.parser.emplace();
    parser.header_limit(options.header_limit);
    parser.body_limit(options.body_limit);
    // A body that may go to the sink is bounded by the sink, not by the
    // parser; one kept in memory still by body_limit (in the body itself).
    parser.get().body().limit = options.body_limit;
    if (s.prepared->streaming.enabled()) {
      parser.body_limit(boost::none);
      parser.get().body().streaming = &s.prepared->streaming;
    }
    if (s.req->method() == beast_http::verb::head) parser.skip(true);
    read_more(cont);
  }

  /// Parses what is buffered, then reads more unless the response is done.
  void read_more(bool cont) {
    attempt_state& s = *s_;
    connection& conn = s.conn();
    if (const error_code ec = parse_buffered(conn.buffer, *s.parser)) { // the body sink runs here
      s.x.error = ec;
      return after_exchange(cont);
    }
    if (s.parser->is_done()) return response_done(cont);
    if (s.cancelled()) {
      s.x.error = asio::error::operation_aborted;
      return after_exchange(cont);
    }
    const std::size_t size = next_read_size(conn.buffer);
    if (size == 0) {
      s.x.error = full_buffer_error(*s.parser); // one unfinished line fills the bounded buffer
      return after_exchange(cont);
    }
    const auto space = conn.buffer.prepare(size);
    step_ = step::reading;
    const duration idle = s.options().idle_timeout;
    if (idle == duration::zero()) {
      std::visit([this, space](auto& stream) { stream.async_read_some(space, std::move(*this)); }, conn.stream);
      return;
    }
    // With an idle limit, every read must bring something within it; the
    // attempt's deadline still bounds the whole. The read itself is the
    // operation: its handler carries the deadline's slot to the socket.
    std::visit(
        [this, space, idle](auto& stream) {
          auto read_some = [&stream, space](auto handler) { stream.async_read_some(space, std::move(handler)); };
          const asio::any_io_executor ex = ex_;
          async_with_deadline<std::size_t>(ex, instant_after(asio::steady_timer::clock_type::now(), idle),
                                           read_some, std::move(*this));
        },
        conn.stream);
  }

  void got(error_code ec, std::size_t n) {
    attempt_state& s = *s_;
    beast::flat_buffer& buffer = s.conn().buffer;
    buffer.commit(n);
    if (n != 0 && !s.answered) {
      // The first byte of any response (an interim one included): the wait
      // for the server ends, the reading of the rest begins.
      s.answered = true;
      s.x.phases.enter(phase::read, clock::now());
    }
    if (ec == asio::error::eof) {
      // The server closed: that ends a body delimited by the connection's
      // end; anything else is cut short.
      if (!s.parser->got_some()) {
        s.x.error = beast_http::error::end_of_stream;
        return after_exchange(true);
      }
      ec = {};
      s.parser->put_eof(ec);
      if (ec) {
        s.x.error = ec;
        return after_exchange(true);
      }
      return response_done(true);
    }
    if (ec) {
      s.x.error = ec;
      return after_exchange(true);
    }
    read_more(true);
  }

  void response_done(bool cont) {
    attempt_state& s = *s_;
    auto& parser = *s.parser;
    const unsigned status = parser.get().result_int();
    if (is_interim(status)) {
      ++s.interim;
      return next_response(cont);
    }
    // The parser knows what the message alone does not: a body that ended
    // with the connection. A request that asked to close, and a connection
    // switched to another protocol, are not reused either. Bytes beyond the
    // response (a server that sent more than it announced) would be read as
    // the next request's answer: such a connection is closed.
    s.keep_alive = parser.keep_alive() && s.req->keep_alive() && status != 101 && s.conn().buffer.size() == 0;
    s.x.res.emplace(to_response(parser.release()));
    s.parser.reset();
    s.x.phases.finish(clock::now());
    s.x.received_at = std::chrono::system_clock::now();
    s.x.reached = stage::complete;
    after_exchange(cont);
  }

  void after_exchange(bool cont) {
    attempt_state& s = *s_;
    exchange& x = s.x;
    // A repeatable request that found its reused connection closed by the
    // server after the check before reuse, before a byte of answer, goes
    // again on a fresh one within the same attempt. The closed connection is
    // dropped with its lease.
    if (x.reused_connection && !s.answered && closed_by_peer(x.error) && s.prepared->repeatable() &&
        !s.cancelled()) {
      s.state->pool.note_stale();
      exchange fresh;
      fresh.idempotency_key = std::move(x.idempotency_key);
      fresh.proxy = std::move(x.proxy);
      fresh.phases = x.phases; // the attempt's clock goes on
      x = std::move(fresh);
      s.parser.reset();
      s.held.reset();
      s.interim = 0;
      s.keep_alive = false;
      return lease(cont);
    }
    // Only a connection whose exchange ended cleanly goes back to the pool.
    if (!x.error && s.keep_alive) s.held->mark_reusable();
    s.held.reset();
    if (x.res && x.res->result_int() >= 200 && x.res->result_int() < 300 && s.prepared->validate)
      if (auto problem = s.prepared->validate(*x.res)) x.problem = std::move(*problem); // may throw: guarded
    finish(cont);
  }

  /// The attempt's end: its exchange to the handler, in place (a step
  /// reached from the initiating call posts itself first).
  void finish(bool cont) {
    if (!cont) {
      const asio::any_io_executor ex = ex_; // not the member of an operation being moved
      asio::post(ex, std::move(*this));
      return;
    }
    attempt_state& s = *s_;
    s.parser.reset();
    s.held.reset(); // the connection goes back (or is closed) before the caller hears
    try {
      end_phases(s.x, *s.prepared, s.context.number);
    } catch (...) {
      return fail(true, std::current_exception());
    }
    exchange out = std::move(s.x);
    release_state();
    this->complete_now(std::exception_ptr(), std::move(out));
  }

  /// Ends the attempt with an exception (a programming error in a callback
  /// of the caller's), as an awaitable's would.
  void fail(bool cont, std::exception_ptr e) {
    if (!cont) {
      s_->failure = std::move(e);
      const asio::any_io_executor ex = ex_;
      asio::post(ex, std::move(*this));
      return;
    }
    s_->parser.reset();
    s_->held.reset();
    release_state();
    this->complete_now(std::move(e), exchange{});
  }

  /// The cancellation_state's filter lives in the handler's slot: taken
  /// out, then the state freed, before the handler runs.
  void release_state() {
    if (s_->parent.is_connected()) s_->parent.clear();
    free_state();
  }


  state_allocator handler_allocator() const {
    return state_allocator(asio::get_associated_allocator(this->handler()));
  }

  void deallocate(void* block) noexcept {
    if (own_block_) block_cache::deallocate(block, sizeof(attempt_state));
    else handler_allocator().deallocate(static_cast<attempt_state*>(block), 1);
  }

  void free_state() noexcept {
    attempt_state* s = std::exchange(s_, nullptr);
    s->~attempt_state();
    deallocate(s);
  }

  asio::any_io_executor ex_;
  attempt_state* s_ = nullptr;
  bool own_block_;
  step step_ = step::starting;
};

} // namespace

} // namespace detail

void client::start_attempt(std::shared_ptr<detail::client_state> state,
                           std::shared_ptr<const detail::prepared_request> request,
                           attempt_context<std::chrono::steady_clock> context, asio::any_io_executor ex,
                           asio::cancellation_slot slot, bool default_allocator,
                           asio::any_completion_handler<void(std::exception_ptr, exchange)> handler) {
  detail::attempt_op(std::move(handler), std::move(ex), slot, default_allocator, std::move(state), std::move(request),
                     context)
      .start();
}

} // namespace coretry::http
