#ifndef CORETRY_TESTING_RUNNER_HPP
#define CORETRY_TESTING_RUNNER_HPP

/// @file
/// The runner that drives an io_context through virtual time, and the error
/// it throws when nothing can make progress.

#include <coretry/testing/clock.hpp>

#include <boost/asio/io_context.hpp>

#include <stdexcept>

namespace coretry::testing {

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

} // namespace coretry::testing

#endif
