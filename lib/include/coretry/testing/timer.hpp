#ifndef CORETRY_TESTING_TIMER_HPP
#define CORETRY_TESTING_TIMER_HPP

/// @file
/// A timer on virtual time, with the interface of Asio's waitable timers.

#include <coretry/detail/erase_handler.hpp>
#include <coretry/testing/clock.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/query.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace coretry::testing {

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
          service_->add_wait(id_, expiry_,
                             coretry::detail::erase_handler<void(boost::system::error_code)>(std::move(handler)),
                             boost::asio::any_io_executor(executor_));
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

} // namespace coretry::testing

#endif
