// What an open local_gate costs the operations that share it, seen from
// outside: threads recording successes and asking at once are all admitted,
// the gate stays open and counts every answer. (That this path takes no
// lock cannot be seen from here; gate_allocation_test.cpp checks that it
// does not allocate.)

#include <coretry/gate.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using coretry::attempt_status;
using coretry::duration;
using action = coretry::gate_decision::action;

TEST_CASE("gate cost: while open, four threads recording successes and asking are all admitted") {
  // Thread t works at (4i + t) x 100 us: eight seconds of virtual time, so
  // results cross the window's buckets. Default options, as most users have.
  coretry::local_gate gate;
  constexpr int threads = 4;
  constexpr int calls = 20'000;
  auto at = [](int i, int t) { return duration(std::chrono::microseconds((4 * i + t) * 100)); };
  std::atomic<int> ready{0};
  std::atomic<bool> done{false};
  std::atomic<int> not_admitted{0};
  std::atomic<int> seen_closed{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      for (int i = 0; i < calls; ++i) {
        const duration now = at(i, t);
        gate.record(attempt_status::success, now);
        if (gate.ask(now, now + 1s, nullptr).what != action::admit) not_admitted.fetch_add(1);
        if (!gate.is_open()) seen_closed.fetch_add(1);
      }
    });
  // Meanwhile the answers are read as metrics would read them: the admitted
  // count only grows.
  std::uint64_t last = 0;
  int went_back = 0;
  std::thread reader([&] {
    while (!done.load()) {
      const std::uint64_t admitted = gate.counts().admitted;
      if (admitted < last) ++went_back;
      last = admitted;
      std::this_thread::yield();
    }
  });
  for (auto& w : workers) w.join();
  done.store(true);
  reader.join();

  CHECK(not_admitted.load() == 0);
  CHECK(seen_closed.load() == 0);
  CHECK(went_back == 0);
  CHECK(gate.is_open());
  CHECK(gate.level() == 0);
  const auto answers = gate.counts();
  CHECK(answers.admitted == std::uint64_t{threads} * calls);
  CHECK(answers.probes == 0);
  CHECK(answers.held == 0);
  CHECK(answers.denied == 0);
}
