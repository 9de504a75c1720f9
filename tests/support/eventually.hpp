#ifndef CORETRY_TESTS_SUPPORT_EVENTUALLY_HPP
#define CORETRY_TESTS_SUPPORT_EVENTUALLY_HPP

// Waiting for what another thread or process does: a bounded poll, so that a
// test that never sees it fails instead of hanging.

#include <chrono>
#include <thread>

namespace coretry::test {

/// Polls `condition` every 5 ms until it holds or `timeout` passes; whether it held.
template <class Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

} // namespace coretry::test

#endif
