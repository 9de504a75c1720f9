#ifndef CORETRY_TESTING_CLOCK_HPP
#define CORETRY_TESTING_CLOCK_HPP

/// @file
/// The clock of virtual time, and the service that keeps each execution
/// context's virtual time and its pending timer waits.

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

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

} // namespace coretry::testing

#endif
