// One attempt of a request, as a composed operation: lease a connection
// (waiting for one when the origin has none to spare), connect when the lease
// brings none, then do what the exchange's rules (exchange_machine.hpp) ask:
// write, read, go again on a fresh connection, keep or close the connection.
// This file is their one driver and holds no rule of HTTP. Its state is one
// block, from the handler's allocator (from the thread's block cache when
// the handler names none), freed before the handler runs; every step runs on
// the handler's executor and the last one calls the handler in place
// (beast::async_base). A new connection's setup is one operation to it, a
// coroutine (establish_within): reusing a pooled connection costs no frame.
//
// Every failure is recorded in the exchange, with how far the attempt got,
// so the classifier can tell "never sent" from "outcome unknown". A
// cancellation between two steps is kept (a cancellation_state between the
// handler's slot and the inner operations) and looked at once, before each
// operation starts (stopped): Beast's http::async_read (Boost 1.81) would
// start its next read without looking.

#include <coretry/http/client.hpp>

#include <coretry/detail/block_cache.hpp>

#include "attempt_op.hpp"
#include "balanced_lease.hpp"
#include "client_state.hpp"
#include "prepare.hpp"

#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/async_base.hpp>

#include <array>
#include <optional>
#include <span>
#include <string>

namespace coretry::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using boost::system::error_code;

namespace detail {

namespace {

using clock = phase_timings::clock;
using attempt_handler = asio::any_completion_handler<void(std::exception_ptr, exchange)>;

/// Ends the attempt's last phase and tells the request's phase observer.
void end_phases(exchange& x, const prepared_request& prepared, unsigned attempt) {
  if (x.phases.running()) x.phases.finish(clock::now());
  if (prepared.phases)
    prepared.phases->attempt_phases({prepared.route, attempt, x.phases, x.reused_connection, x.res.has_value()});
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
    if (prepared.body || prepared.decorate) {
      if (auto problem = copy_for_attempt(prepared, s.context, s.options().user_agent, s.per_attempt)) {
        x.problem = std::move(*problem);
        return finish(false);
      }
      s.req = &*s.per_attempt;
    }
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

  bool try_lease() {
    attempt_state& s = *s_;
    auto got = lease_toward_pick(s.state->health, s.state->pool, *s.prepared->where.key, s.target, s.avoid,
                                 s.lease_at, s.pick);
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
    if (stopped(cont)) return;
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
    if (stopped(cont)) return;
    // The read buffer's bound is what limits a chunk-size line, its
    // extensions and the trailers: Beast 1.81's parser waits for a whole
    // line however long it is.
    client_state& c = *s.state;
    s.setup.emplace(connect_context{c.tls, c.pool, c.health,
                                    std::size_t{c.options.header_limit} + c.options.line_limit,
                                    c.options.header_limit, c.options.connection_attempt_delay});
    step_ = step::starting;
    asio::co_spawn(ex_, establish_within(s.prepared->where, *s.setup, s.avoid, s.pick, *s.held, s.x,
                                            c.options.connect_timeout),
                   std::move(*this));
  }

  void connected(bool cont) {
    attempt_state& s = *s_;
    s.prepared->used.add(*s.x.address);
    const clock::time_point now = clock::now();
    s.x.phases.enter(phase::write, now);
    s.in_flight.start(s.state->health, s.target, *s.x.address, now, s.resent);
    connection& conn = s.conn();
    run(s.machine.start(*s.req, conn.buffer, conn.head, s.x.reused_connection), cont);
  }

  /// The one look at cancellation, before each operation starts: one that
  /// came while no operation ran reaches none, and an attempt could wait
  /// forever on a server that never answers. True when the attempt ends
  /// here, with operation_aborted.
  bool stopped(bool cont) {
    if (!s_->cancelled()) return false;
    run(s_->machine.failed(asio::error::operation_aborted), cont);
    return true;
  }

  /// Does what the exchange's rules ask next.
  void run(const exchange_action& next, bool cont) {
    using kind = exchange_action::kind;
    attempt_state& s = *s_;
    if (next.complete) { // the final response's end ends the reading
      const clock::time_point now = clock::now();
      s.x.phases.finish(now);
      s.in_flight.answered(now);
      s.x.received_at = std::chrono::system_clock::now();
    }
    switch (next.next) {
    case kind::write:
      if (stopped(cont)) return;
      step_ = step::writing;
      return async_write_all(s.conn(), next.out, std::move(*this));
    case kind::read:
      if (stopped(cont)) return;
      step_ = step::reading;
      return async_read_within(s.conn(), next.in, s.options().idle_timeout, ex_, std::move(*this));
    case kind::retry_fresh:
      if (s.cancelled()) return run(s.machine.retry_refused(), cont);
      return lease_again(cont);
    case kind::keep_connection:
      s.held->mark_reusable();
      [[fallthrough]];
    case kind::close_connection:
      s.held.reset();
      return run(s.machine.released(), cont); // the caller's validation may throw: guarded
    case kind::done:
      return finish(cont);
    }
  }

  /// One read done: the first byte of any response (interim or not) ends
  /// the wait for the server when it arrived; parsing it is reading.
  void got(error_code ec, std::size_t n) {
    const clock::time_point arrived = s_->machine.answered() ? clock::time_point{} : clock::now();
    const exchange_action& next = s_->machine.read(ec, n);
    if (next.answered) s_->x.phases.enter(phase::read, arrived);
    run(next, true);
  }

  void written(error_code ec, std::size_t n) {
    if (!ec) s_->x.phases.enter(phase::first_byte, clock::now());
    run(s_->machine.written(ec, n), true);
  }

  /// The reused connection was closed by the server before a byte of
  /// answer: the request goes again on a fresh one within the same attempt;
  /// the closed connection is dropped with its lease.
  void lease_again(bool cont) {
    attempt_state& s = *s_;
    exchange& x = s.x;
    s.state->pool.note_stale();
    s.in_flight.end();
    s.resent = true;
    exchange fresh;
    fresh.idempotency_key = std::move(x.idempotency_key);
    fresh.proxy = std::move(x.proxy);
    fresh.phases = x.phases; // the attempt's clock goes on
    x = std::move(fresh);
    s.held.reset();
    lease(cont);
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
