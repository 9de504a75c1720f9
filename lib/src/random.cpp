#include <coretry/random.hpp>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include <pthread.h>
#include <unistd.h>

namespace coretry {
namespace {

std::mt19937_64 make_independent_engine() {
  std::random_device device;
  // random_device is the real source of independence; the process id, thread
  // id and a clock reading are mixed in so that a weak random_device still
  // cannot hand two processes the same schedule.
  std::seed_seq seeds{device(), device(), device(), device(),
                      static_cast<unsigned>(::getpid()),
                      static_cast<unsigned>(std::hash<std::thread::id>{}(std::this_thread::get_id())),
                      static_cast<unsigned>(std::chrono::high_resolution_clock::now().time_since_epoch().count())};
  return std::mt19937_64(seeds);
}

// A forked child inherits its parent's generator state; without a reseed the
// two processes would draw the same schedule. Each fork bumps the generation.
std::atomic<unsigned> fork_generation{0};
const bool fork_hook_installed = [] {
  ::pthread_atfork(nullptr, nullptr, [] { fork_generation.fetch_add(1, std::memory_order_relaxed); });
  return true;
}();

} // namespace

std::uint64_t independent_random::uniform(std::uint64_t max_inclusive) {
  thread_local std::mt19937_64 engine = make_independent_engine();
  thread_local unsigned generation = fork_generation.load(std::memory_order_relaxed);
  if (const unsigned now = fork_generation.load(std::memory_order_relaxed); now != generation) {
    engine = make_independent_engine();
    generation = now;
  }
  return std::uniform_int_distribution<std::uint64_t>(0, max_inclusive)(engine);
}

independent_random& independent_random::instance() noexcept {
  static independent_random source;
  return source;
}

} // namespace coretry
