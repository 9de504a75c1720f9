#ifndef CORETRY_TESTING_MANUAL_CLOCK_HPP
#define CORETRY_TESTING_MANUAL_CLOCK_HPP

/// @file
/// Virtual time for tests: a timer whose clock only moves when a runner moves
/// it, and a runner that drives an io_context through virtual time the way a
/// paused runtime does (run all that is ready, then jump to the next expiry).
/// A simulated hour costs what its handlers cost, nothing more.
///
/// This header includes the whole test kit; each part has its own header:
/// coretry/testing/clock.hpp (manual_clock, manual_time_service),
/// coretry/testing/timer.hpp (basic_manual_timer, manual_timer),
/// coretry/testing/runner.hpp (manual_runner, deadlock_error) and
/// coretry/testing/random.hpp (scripted_random, seeded_random).

#include <coretry/testing/clock.hpp>
#include <coretry/testing/random.hpp>
#include <coretry/testing/runner.hpp>
#include <coretry/testing/timer.hpp>

#endif
