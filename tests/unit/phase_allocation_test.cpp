// Recording an attempt's phases allocates nothing: the HTTP client's phase
// timings and the Prometheus phase histograms, counted by the replaced
// operator new of gate_allocation_test.cpp (one program).

#include <coretry/prometheus_phases.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace coretry_allocation {
std::uint64_t allocations_so_far() noexcept;
} // namespace coretry_allocation

TEST_CASE("recording phases and their histograms allocates nothing") {
  using coretry::phase;
  coretry::prometheus_phase_histograms histograms({"/a", "/b"});
  const auto before = coretry_allocation::allocations_so_far();
  const auto t0 = coretry::phase_timings::clock::now();
  for (int i = 0; i < 1000; ++i) {
    coretry::phase_timings p;
    p.enter(phase::pool_wait, t0);
    p.enter(phase::lookup, t0 + std::chrono::microseconds(i));
    p.enter(phase::connect, t0 + std::chrono::microseconds(2 * i));
    p.enter(phase::tls, t0 + std::chrono::microseconds(3 * i));
    p.enter(phase::write, t0 + std::chrono::microseconds(4 * i));
    p.enter(phase::first_byte, t0 + std::chrono::microseconds(5 * i));
    p.enter(phase::read, t0 + std::chrono::milliseconds(i));
    p.finish(t0 + std::chrono::milliseconds(2 * i));
    histograms.attempt_phases(coretry::attempt_phases_event{i % 2 ? "/a" : "/c", 1, p, false, true});
  }
  CHECK(coretry_allocation::allocations_so_far() == before);
}
