#ifndef CORETRY_TESTS_HTTP_PHASE_RECORDER_HPP
#define CORETRY_TESTS_HTTP_PHASE_RECORDER_HPP

// Keeps every attempt's phase timings as the client reports them, for the
// cases that look at attempts other than the last.

#include <coretry/phases.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace coretry_tests {

/// A phase observer for requests run on one thread.
struct phase_recorder final : coretry::phase_observer {
  struct seen {
    std::string route;
    unsigned attempt;
    coretry::phase_timings phases;
    bool reused_connection;
    bool complete;
  };

  void attempt_phases(const coretry::attempt_phases_event& e) noexcept override {
    try {
      attempts.push_back({std::string(e.route), e.attempt, e.phases, e.reused_connection, e.complete});
    } catch (...) {
      failed = true;
    }
  }

  std::vector<seen> attempts;
  bool failed = false;
};

} // namespace coretry_tests

#endif
