#ifndef CORETRY_TESTS_UNIT_LATENCY_SAMPLES_HPP
#define CORETRY_TESTS_UNIT_LATENCY_SAMPLES_HPP

// What the latency tracker's tests record, and a tracker that reads its
// window afresh every time.

#include <coretry/latency_tracker.hpp>

namespace coretry_tests::latency {

using coretry::duration;
using coretry::latency_result;
using coretry::latency_tracker;

constexpr auto success = latency_result::success;
constexpr auto timeout = latency_result::timeout;
constexpr auto failure = latency_result::failure;

inline latency_tracker::options uncached() {
  latency_tracker::options o;
  o.refresh_interval = duration::zero();
  return o;
}

} // namespace coretry_tests::latency

#endif
