#ifndef CORETRY_TESTING_MANUAL_CLOCK_HPP
#define CORETRY_TESTING_MANUAL_CLOCK_HPP

/// Virtual time for tests: a timer whose clock only moves when a runner moves
/// it, and a runner that drives an io_context through virtual time the way a
/// paused runtime does (run all that is ready, then jump to the next expiry).
/// A simulated hour costs what its handlers cost, nothing more.

#include <coretry/random.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/query.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <vector>

namespace coretry::testing {

/// The clock of virtual time. Its time lives in each execution context's
/// manual_time_service, so read it through a timer or a runner, not a static.
struct manual_clock {
  using rep = std::int64_t;
  using period = std::nano;
  using duration = std::chrono::nanoseconds;
  using time_point = std::chrono::time_point<manual_clock>;
  static constexpr bool is_steady = true;
};

/// Keeps one execution context's virtual time and its pending timer waits.
class manual_time_service final : public boost::asio::execution_context::service {
public:
  using key_type = manual_time_service;
  static boost::asio::execution_context::id id;

  explicit manual_time_service(boost::asio::execution_context& context);
  ~manual_time_service() override;

  manual_clock::time_point now() const;
  /// The earliest instant at which a pending wait is due (its expiry plus
  /// the lateness), if any wait is pending.
  std::optional<manual_clock::time_point> next_expiry() const;
  /// Makes every wait complete `late` after its expiry, the way a real timer
  /// fires late (scheduling, timer slack). Zero, the default, is punctual.
  void set_lateness(manual_clock::duration late);
  manual_clock::duration lateness() const;
  std::size_t pending_waits() const;
  /// Moves time to `t` (never backwards) and completes, in expiry order,
  /// every wait due by then. Returns how many completed.
  std::size_t advance_to(manual_clock::time_point t);

  // Used by basic_manual_timer.
  std::uint64_t new_timer_id();
  void add_wait(std::uint64_t timer, manual_clock::time_point expiry,
                boost::asio::any_completion_handler<void(boost::system::error_code)> handler,
                const boost::asio::any_io_executor& io_executor);
  std::size_t cancel_timer(std::uint64_t timer);

private:
  struct pending_wait;
  void shutdown() override;
  void cancel_wait(std::uint64_t wait, bool from_slot);
  void complete(pending_wait& wait, boost::system::error_code ec, bool clear_slot);

  manual_clock::time_point due(manual_clock::time_point expiry) const; // with mutex_ held

  mutable std::mutex mutex_;
  manual_clock::time_point now_{};
  manual_clock::duration lateness_{};
  std::uint64_t next_id_ = 1;
  std::multimap<manual_clock::time_point, std::uint64_t> by_expiry_;
  std::multimap<std::uint64_t, std::uint64_t> by_timer_; // timer id -> wait id
  std::map<std::uint64_t, pending_wait*> waits_;
};

/// A timer on virtual time with the interface of Asio's waitable timers
/// (expires_after / expires_at / expiry / cancel / async_wait). Its waits honour
/// per-operation cancellation of every type.
template <class Executor = boost::asio::any_io_executor>
class basic_manual_timer {
public:
  using executor_type = Executor;
  using clock_type = manual_clock;
  using duration = manual_clock::duration;
  using time_point = manual_clock::time_point;

  explicit basic_manual_timer(const executor_type& ex)
      : executor_(ex),
        service_(&boost::asio::use_service<manual_time_service>(
            boost::asio::query(ex, boost::asio::execution::context))),
        id_(service_->new_timer_id()) {}

  template <class ExecutionContext>
    requires std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&>
  explicit basic_manual_timer(ExecutionContext& context) : basic_manual_timer(context.get_executor()) {}

  basic_manual_timer(basic_manual_timer&& other) noexcept
      : executor_(other.executor_), service_(other.service_), id_(other.id_), expiry_(other.expiry_) {
    other.id_ = 0;
  }
  basic_manual_timer& operator=(basic_manual_timer&&) = delete;
  basic_manual_timer(const basic_manual_timer&) = delete;

  /// Like Asio's timers, destruction cancels the pending waits.
  ~basic_manual_timer() {
    if (id_ != 0) service_->cancel_timer(id_);
  }

  executor_type get_executor() const noexcept { return executor_; }
  /// The current virtual time of this timer's execution context.
  time_point now() const { return service_->now(); }
  time_point expiry() const noexcept { return expiry_; }

  std::size_t expires_at(time_point t) {
    const std::size_t cancelled = cancel();
    expiry_ = t;
    return cancelled;
  }
  /// Saturates at the clock's last instant, as Asio's timers do.
  std::size_t expires_after(duration d) {
    const time_point t = now();
    return expires_at(d >= time_point::max() - t ? time_point::max() : t + d);
  }
  std::size_t cancel() { return service_->cancel_timer(id_); }

  template <class WaitToken>
  auto async_wait(WaitToken&& token) {
    return boost::asio::async_initiate<WaitToken, void(boost::system::error_code)>(
        [this](auto handler) {
          service_->add_wait(id_, expiry_, std::move(handler), boost::asio::any_io_executor(executor_));
        },
        token);
  }

private:
  executor_type executor_;
  manual_time_service* service_;
  std::uint64_t id_;
  time_point expiry_{};
};

using manual_timer = basic_manual_timer<>;

/// Thrown by manual_runner when work remains but nothing can make progress:
/// no handler is ready and no timer is pending.
class deadlock_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Drives an io_context through virtual time: runs every ready handler, then
/// jumps the clock to the earliest pending expiry, and repeats.
class manual_runner {
public:
  explicit manual_runner(boost::asio::io_context& io);

  manual_clock::time_point now() const { return service_->now(); }
  /// Virtual time since the context's epoch (which starts at zero).
  manual_clock::duration elapsed() const { return now().time_since_epoch(); }

  /// Runs until the io_context has no work left. Throws deadlock_error when
  /// work remains with nothing ready and no timer pending.
  void run();
  /// Runs every wait due by `t` in order, leaving the clock at `t`.
  void run_until(manual_clock::time_point t);
  void run_for(manual_clock::duration d) { run_until(now() + d); }
  /// Runs the handlers that are ready now, without moving time.
  void run_ready();
  /// Every wait completes `late` after its expiry from now on.
  void set_lateness(manual_clock::duration late) { service_->set_lateness(late); }

private:
  boost::asio::io_context& io_;
  manual_time_service* service_;
};

/// Deterministic draws for tests: each draw returns round(fraction x max) for
/// the next scripted fraction in [0, 1]. Running out is a test bug: it throws.
class scripted_random final : public random_source {
public:
  scripted_random(std::initializer_list<double> fractions);
  std::uint64_t uniform(std::uint64_t max_inclusive) override;
  std::size_t draws_used() const noexcept { return next_; }

private:
  std::vector<double> fractions_;
  std::size_t next_ = 0;
};

/// A reproducible pseudo-random source for simulations: same seed, same draws.
class seeded_random final : public random_source {
public:
  explicit seeded_random(std::uint64_t seed) noexcept : state_(seed) {}
  std::uint64_t uniform(std::uint64_t max_inclusive) override;

private:
  std::uint64_t next() noexcept;
  std::uint64_t state_;
};

} // namespace coretry::testing

#endif
