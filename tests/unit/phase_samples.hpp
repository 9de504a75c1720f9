#ifndef CORETRY_TESTS_UNIT_PHASE_SAMPLES_HPP
#define CORETRY_TESTS_UNIT_PHASE_SAMPLES_HPP

// Phase timings of an attempt, for the phase histograms' tests.

#include <coretry/phases.hpp>

#include <chrono>

namespace coretry_tests::phases {

using namespace std::chrono_literals;
using coretry::phase;
using coretry::phase_timings;

inline const phase_timings::clock::time_point origin{std::chrono::seconds(1000)};

/// A reused connection: 1 ms waiting for it (exactly the first bucket's
/// bound), 0.5 ms writing, `server` waiting for the first byte, 3 ms reading.
inline phase_timings reused(coretry::duration server) {
  phase_timings p;
  p.enter(phase::pool_wait, origin);
  p.enter(phase::write, origin + 1ms);
  p.enter(phase::first_byte, origin + 1500us);
  p.enter(phase::read, origin + 1500us + server);
  p.finish(origin + 4500us + server);
  return p;
}

} // namespace coretry_tests::phases

#endif
