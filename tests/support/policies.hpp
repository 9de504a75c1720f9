#ifndef CORETRY_TESTS_SUPPORT_POLICIES_HPP
#define CORETRY_TESTS_SUPPORT_POLICIES_HPP

// The retry policies and gate options the tests share, so that a case names
// only the values it is about.

#include <coretry/gate.hpp>
#include <coretry/policy.hpp>

#include <chrono>

namespace coretry::test {

/// For cases that count attempts rather than time them: the case's overall
/// deadline and attempt limit, and backoff windows of a few milliseconds,
/// from `window` to twice that. The rest as coretry::policy has it.
inline policy quick_policy(duration overall_deadline, duration attempt_limit, duration window) {
  policy p;
  p.overall_deadline = overall_deadline;
  p.attempt_limit = attempt_limit;
  p.backoff.initial_window = window;
  p.backoff.max_window = 2 * window;
  return p;
}

/// quick_policy for a client of a server on loopback (windows of 20 and
/// 40 ms): an attempt may start with 10 ms left, nothing is kept back for the
/// result, and a server's delay is spread by at most 10 ms.
inline policy loopback_policy(duration overall_deadline = std::chrono::seconds(5),
                              duration attempt_limit = std::chrono::seconds(2)) {
  policy p = quick_policy(overall_deadline, attempt_limit, std::chrono::milliseconds(20));
  p.min_attempt_allowance = std::chrono::milliseconds(10);
  p.completion_reserve = duration::zero();
  p.server_delay_spread = std::chrono::milliseconds(10);
  return p;
}

/// A small gate: 1 s window, judged from 10 results, one probe per 100 ms,
/// two successes per doubling and two failures to fall back,
/// `slow_start_steps` doublings before it opens, waits of at most 10 s.
inline gate_model::options small_gate(unsigned slow_start_steps = 2) {
  return {.window = std::chrono::seconds(1),
          .min_requests = 10,
          .k = 2.0,
          .close_above = 0.2,
          .probe_interval = std::chrono::milliseconds(100),
          .step_successes = 2,
          .fallback_failures = 2,
          .slow_start_steps = slow_start_steps,
          .max_hold = std::chrono::seconds(10)};
}

/// A gate for a fleet sharing its state: the default 10 s window judged from
/// 20 results, one probe per 100 ms, and open again after one step of two
/// successes.
inline gate_model::options fleet_gate() {
  gate_model::options g;
  g.min_requests = 20;
  g.probe_interval = std::chrono::milliseconds(100);
  g.step_successes = 2;
  g.slow_start_steps = 1;
  return g;
}

} // namespace coretry::test

#endif
