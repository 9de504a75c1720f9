#ifndef CORETRY_TESTS_REDIS_FLEET_HPP
#define CORETRY_TESTS_REDIS_FLEET_HPP

// Options and observers for shared_state in the tests.

#include "redis_server.hpp"

#include <coretry/redis/shared_state.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace redis_tests {

/// What on_problem was told, in order (called on the reconciler's thread).
class problems {
public:
  std::function<void(std::string_view)> callback() {
    auto self = state_;
    return [self](std::string_view message) {
      std::lock_guard lock(self->mutex);
      self->messages.emplace_back(message);
    };
  }
  std::vector<std::string> all() const {
    std::lock_guard lock(state_->mutex);
    return state_->messages;
  }
  std::size_t size() const { return all().size(); }

private:
  struct state {
    mutable std::mutex mutex;
    std::vector<std::string> messages;
  };
  std::shared_ptr<state> state_ = std::make_shared<state>();
};

/// A process `id` of a fleet on 127.0.0.1:`port`, exchanging every `period`
/// and reconnecting quickly.
inline coretry::redis::shared_state::options fleet_options(std::uint16_t port, std::string id,
                                                           coretry::duration period = std::chrono::milliseconds(50)) {
  coretry::redis::shared_state::options o;
  o.server.host = "127.0.0.1";
  o.server.port = port;
  o.process_id = std::move(id);
  o.period = period;
  o.reconnect = coretry::backoff_policy{std::chrono::milliseconds(20), 2.0, std::chrono::milliseconds(200),
                                        coretry::jitter_kind::full};
  return o;
}

inline coretry::duration steady_now() { return std::chrono::steady_clock::now().time_since_epoch(); }

using milliseconds_d = std::chrono::duration<double, std::milli>;

inline double since_ms(std::chrono::steady_clock::time_point t0) {
  return milliseconds_d(std::chrono::steady_clock::now() - t0).count();
}

} // namespace redis_tests

#endif
