// The phase timings of an HTTP attempt on exact times: each change of phase
// is given its instant, so every duration is known to the nanosecond.

#include <coretry/phases.hpp>

#include <doctest/doctest.h>

#include <chrono>

using namespace std::chrono_literals;
using coretry::phase;
using coretry::phase_timings;

namespace {
const phase_timings::clock::time_point phases_t0{std::chrono::seconds(1000)};
} // namespace

TEST_CASE("phase timings: a new https connection, phase by phase") {
  phase_timings p;
  CHECK(p.empty());
  CHECK_FALSE(p.running());
  p.enter(phase::pool_wait, phases_t0);
  p.enter(phase::lookup, phases_t0 + 2ms);
  p.enter(phase::connect, phases_t0 + 5ms);
  p.enter(phase::tls, phases_t0 + 6ms);
  p.enter(phase::write, phases_t0 + 16ms);
  p.enter(phase::first_byte, phases_t0 + 17ms);
  p.enter(phase::read, phases_t0 + 117ms);
  CHECK(p.running() == phase::read);
  p.finish(phases_t0 + 120ms);
  CHECK_FALSE(p.running());
  CHECK(p[phase::pool_wait] == 2ms);
  CHECK(p[phase::lookup] == 3ms);
  CHECK(p[phase::connect] == 1ms);
  CHECK(p[phase::tls] == 10ms);
  CHECK(p[phase::write] == 1ms);
  CHECK(p[phase::first_byte] == 100ms);
  CHECK(p[phase::read] == 3ms);
  CHECK(p.total() == 120ms);
}

TEST_CASE("phase timings: a reused connection has no lookup, connect or tls") {
  phase_timings p;
  p.enter(phase::pool_wait, phases_t0);
  p.enter(phase::write, phases_t0); // leased at once: a zero wait, still reached
  p.enter(phase::first_byte, phases_t0 + 1ms);
  p.enter(phase::read, phases_t0 + 4ms);
  p.finish(phases_t0 + 4ms);
  CHECK(p[phase::pool_wait] == 0ms);
  CHECK_FALSE(p[phase::lookup]);
  CHECK_FALSE(p[phase::connect]);
  CHECK_FALSE(p[phase::tls]);
  CHECK(p[phase::first_byte] == 3ms);
  CHECK(p[phase::read] == 0ms);
  CHECK(p.total() == 4ms);
}

TEST_CASE("phase timings: a failed attempt has the phases it reached, its last one until it ended") {
  phase_timings p;
  p.enter(phase::pool_wait, phases_t0);
  p.enter(phase::connect, phases_t0 + 1ms);
  p.enter(phase::write, phases_t0 + 3ms);
  p.enter(phase::first_byte, phases_t0 + 4ms);
  p.finish(phases_t0 + 250ms); // the attempt's deadline
  CHECK(p[phase::first_byte] == 246ms);
  CHECK_FALSE(p[phase::read]);
  CHECK_FALSE(p[phase::lookup]);
  CHECK(p.total() == 250ms);
  // Finishing again changes nothing.
  p.finish(phases_t0 + 300ms);
  CHECK(p.total() == 250ms);
}

TEST_CASE("phase timings: a phase entered again adds to its time") {
  phase_timings p;
  p.enter(phase::pool_wait, phases_t0);
  p.enter(phase::write, phases_t0 + 1ms);
  p.enter(phase::first_byte, phases_t0 + 2ms);
  // The reused connection was closed by the server: a new one, same attempt.
  p.enter(phase::pool_wait, phases_t0 + 3ms);
  p.enter(phase::connect, phases_t0 + 5ms);
  p.enter(phase::write, phases_t0 + 6ms);
  p.enter(phase::first_byte, phases_t0 + 8ms);
  p.enter(phase::read, phases_t0 + 10ms);
  p.finish(phases_t0 + 11ms);
  CHECK(p[phase::pool_wait] == 3ms);
  CHECK(p[phase::write] == 3ms);
  CHECK(p[phase::first_byte] == 3ms);
  CHECK(p.total() == 11ms);
}

TEST_CASE("phase timings: a clock that goes backwards counts as no time") {
  phase_timings p;
  p.enter(phase::pool_wait, phases_t0 + 5ms);
  p.enter(phase::write, phases_t0);
  p.finish(phases_t0 + 1ms);
  CHECK(p[phase::pool_wait] == 0ms);
  CHECK(p[phase::write] == 1ms);
}

TEST_CASE("phase names are the metric label values") {
  CHECK(to_string(phase::pool_wait) == "pool_wait");
  CHECK(to_string(phase::lookup) == "lookup");
  CHECK(to_string(phase::connect) == "connect");
  CHECK(to_string(phase::tls) == "tls");
  CHECK(to_string(phase::write) == "write");
  CHECK(to_string(phase::first_byte) == "first_byte");
  CHECK(to_string(phase::read) == "read");
}
