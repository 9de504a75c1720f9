#ifndef CORETRY_SRC_HTTP_WAITER_REGISTRY_HPP
#define CORETRY_SRC_HTTP_WAITER_REGISTRY_HPP

// The pools of an execution context, so that their waiters are destroyed
// when the context shuts down, as Asio destroys its own pending operations.
// A waiter is an attempt, which holds the client's state, which holds the
// pool: nothing else would ever free it once nothing runs. Internal to
// coretry::http.

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <mutex>
#include <vector>

namespace coretry::http::detail {

/// A waiter's handler.
using wait_handler = boost::asio::any_completion_handler<void(boost::system::error_code)>;

/// What a pool does for the registry.
class waiter_holder {
public:
  /// The registry shuts down: the holder moves its waiters into `out` and
  /// from now on keeps none (it destroys any it is given) and no longer
  /// refers to the registry. Called with the registry's lock held; the
  /// registry destroys the waiters after letting go of it (destroying one
  /// may destroy the holder itself).
  virtual void take_waiters_at_shutdown(std::vector<wait_handler>& out) = 0;

protected:
  ~waiter_holder() = default;
};

class waiter_registry final : public boost::asio::execution_context::service {
public:
  using key_type = waiter_registry;
  static inline boost::asio::execution_context::id id;

  explicit waiter_registry(boost::asio::execution_context& context)
      : boost::asio::execution_context::service(context) {}

  /// False when the context has shut down already: the holder is then not
  /// registered and must keep no waiter.
  bool add(waiter_holder* h) {
    std::lock_guard lock(mutex_);
    if (shut_down_) return false;
    holders_.push_back(h);
    return true;
  }

  /// From a holder's destructor, while the registry lives.
  void remove(waiter_holder* h) {
    std::lock_guard lock(mutex_);
    if (const auto it = std::find(holders_.begin(), holders_.end(), h); it != holders_.end()) holders_.erase(it);
  }

private:
  void shutdown() override {
    std::unique_lock lock(mutex_);
    shut_down_ = true;
    while (!holders_.empty()) {
      waiter_holder* h = holders_.back();
      holders_.pop_back();
      // The holder is alive: its destructor waits for this lock to remove
      // itself.
      std::vector<wait_handler> taken;
      h->take_waiters_at_shutdown(taken);
      lock.unlock();
      taken.clear(); // destroyed unrun, each with its attempt
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::vector<waiter_holder*> holders_;
  bool shut_down_ = false;
};

} // namespace coretry::http::detail

#endif
