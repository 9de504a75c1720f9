// When a shared gate opens, the fleet must forget the outage's window: the
// exchange telling it so is sent until one succeeds, and counts that an
// exchange in flight brings back from before the opening are not applied.
// A scripted fake Redis plays the fleet: it answers every exchange with 100
// failures of other processes until it is told to forget.

#include "fake_redis.hpp"
#include "redis_server.hpp"

#include <policies.hpp>

#include <coretry/redis/shared_state.hpp>

#include <doctest/doctest.h>

#include <condition_variable>
#include <mutex>
#include <string>

using namespace redis_tests;
using coretry::attempt_status;
using coretry::local_gate;
using coretry::redis::shared_state;

namespace {

const std::string loaded = "$40\r\n" + std::string(40, 'a') + "\r\n";

std::string numbers(long long granted, long long processes, long long requests, long long accepts) {
  return "*5\r\n:" + std::to_string(granted) + "\r\n:" + std::to_string(processes) + "\r\n:" +
         std::to_string(requests) + "\r\n:" + std::to_string(accepts) + "\r\n:0\r\n";
}

/// The fleet as the fake plays it.
struct fleet_script {
  std::mutex mutex;
  std::condition_variable changed;
  bool forgotten = false;   // an exchange with forget = 1 succeeded
  int forgets = 0;          // exchanges with forget = 1 received
  bool fail_first_forget = false;
  bool hold = false;        // the next exchange waits for release
  bool holding = false;
  bool release = false;

  std::string answer(int n, const std::string& raw) {
    if (n == 0) return loaded; // SCRIPT LOAD
    const auto args = command_arguments(raw);
    if (args.size() != 17 || args[0] != "EVALSHA") return "-ERR not an exchange\r\n";
    std::unique_lock lock(mutex);
    const bool forget = args[13] == "1";
    if (forget && ++forgets == 1 && fail_first_forget) return "garbage\r\n";
    if (hold) {
      hold = false;
      holding = true;
      changed.notify_all();
      changed.wait_for(lock, std::chrono::seconds(5), [&] { return release; });
      return numbers(0, 2, 100, 0); // counts read before the gate opened
    }
    if (forget) forgotten = true;
    return numbers(0, 2, forgotten ? 0 : 100, 0);
  }
};

void recover(local_gate& gate) {
  for (int i = 0; i < 4; ++i) gate.record(attempt_status::success, steady_now());
}

} // namespace

TEST_CASE("redis: the fleet is told to forget the window again when that exchange failed") {
  fleet_script fleet;
  fleet.fail_first_forget = true;
  fake_redis fake([&](int n, const std::string& raw) { return fleet.answer(n, raw); });
  io_thread io;
  shared_state s(io.executor(), fleet_options(fake.port(), "healthy"));
  auto gate = s.gate("pricing", coretry::test::fleet_gate());
  s.start();
  REQUIRE(eventually([&] { return !gate->is_open(); })); // the fleet's failures close it

  recover(*gate);
  REQUIRE(gate->is_open());
  REQUIRE(eventually([&] {
    std::lock_guard lock(fleet.mutex);
    return fleet.forgotten;
  }));
  CHECK(s.fallbacks() == 1); // the first exchange carrying it failed
  {
    std::lock_guard lock(fleet.mutex);
    CHECK(fleet.forgets == 2);
  }
  const auto n = s.exchanges();
  REQUIRE(eventually([&] { return s.exchanges() >= n + 3; }));
  CHECK(gate->is_open());
  CHECK(gate->processes() == 2);
}

TEST_CASE("redis: counts an exchange brings from before the gate opened do not close it again") {
  fleet_script fleet;
  fake_redis fake([&](int n, const std::string& raw) { return fleet.answer(n, raw); });
  io_thread io;
  shared_state s(io.executor(), fleet_options(fake.port(), "healthy", std::chrono::milliseconds(500)));
  auto gate = s.gate("pricing", coretry::test::fleet_gate());
  s.start();
  REQUIRE(eventually([&] { return !gate->is_open(); }));

  {
    std::unique_lock lock(fleet.mutex);
    fleet.hold = true;
    REQUIRE(fleet.changed.wait_for(lock, std::chrono::seconds(5), [&] { return fleet.holding; }));
  }
  recover(*gate); // opens while the exchange is out
  REQUIRE(gate->is_open());
  {
    std::lock_guard lock(fleet.mutex);
    fleet.release = true;
    fleet.changed.notify_all();
  }
  const auto n = s.exchanges();
  REQUIRE(eventually([&] { return s.exchanges() >= n + 2; }));
  CHECK(gate->is_open());
  CHECK(s.fallbacks() == 0);
  std::lock_guard lock(fleet.mutex);
  CHECK(fleet.forgotten);
}
