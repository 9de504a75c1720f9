// A soak run, not part of CI: mixed faults for a long time, then checks that
// open descriptors came back to their number at the start and that resident
// memory stopped growing once the virtual phase was warm.
//
//   bench_soak [virtual-hours=1] [real-seconds=180] [seed]
//
// 1. Virtual time: operations start every 100 ms of manual-clock time for
//    `virtual-hours`, each retrying a fake dependency that fails at random
//    (timeouts, resets, 503 with and without a server delay, 404), under a
//    shared retry budget. Costs seconds of real time.
// 2. Real time: for `real-seconds`, 32 concurrent loops send requests through
//    coretry::http::client to the fault server on loopback, each to a random
//    fault kind, some cancelled at random.
// Prints attempts and stops by reason for each phase, resident memory (VmRSS
// and its peak VmHWM from /proc/self/status) and open descriptors.
//
// Exit status 1 when
// - more descriptors are open at the end than at the start (a socket or file
//   left behind), or
// - the second half of the virtual phase grew VmRSS by more than
//   `leak_bound_kib`. The first half warms up (the budget, the timer queue,
//   the allocator's free lists); from its end to the end of the second half
//   as many operations are in flight and nothing should accumulate, so growth
//   there is what a leak of the engine looks like. The phase is single
//   threaded and its inputs seeded, so the figure is steady; 1,024 KiB over
//   the default hour's 18,000 operations of that half catches a leak of 60
//   bytes per operation (20 bytes over `bench_soak 3`'s 54,000).
// The real phase's memory is reported, not judged: it runs the fault server
// in-process (its request log fills up to its limit) on three threads, whose
// allocator arenas grow with the scheduling, so a bound on it would measure
// the machine. Leaks there are the asan preset's job (detect_leaks=1).

#include <coretry/coretry.hpp>
#include <coretry/http/client.hpp>
#include <coretry/testing/manual_clock.hpp>
#include <faults/fault_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using namespace std::chrono_literals;

namespace {

constexpr long leak_bound_kib = 1024;

/// A "Name:   123 kB" line of /proc/self/status, in KiB; -1 if missing.
long status_kib(const std::string& name) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with(name + ":")) return std::strtol(line.c_str() + name.size() + 1, nullptr, 10);
  return -1;
}

long resident_kib() { return status_kib("VmRSS"); }

std::size_t open_descriptors() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

void print_counters(const char* phase, const coretry::retry_counters& counters) {
  const auto s = counters.read();
  std::printf("%s: %llu operations, %llu attempts, backoff %.1f s in all\n  stops:", phase,
              static_cast<unsigned long long>(s.operations), static_cast<unsigned long long>(s.attempts),
              std::chrono::duration<double>(s.total_backoff).count());
  for (int r = 0; r < coretry::stop_reason_count; ++r)
    if (s.stops[r])
      std::printf(" %s %llu", std::string(coretry::to_string(static_cast<coretry::stop_reason>(r))).c_str(),
                  static_cast<unsigned long long>(s.stops[r]));
  std::printf("\n");
}

struct virtual_memory {
  long at_half = -1; ///< VmRSS when half the virtual time had passed
  long at_end = -1;  ///< VmRSS when the last operation was started
};

virtual_memory virtual_phase(double hours, std::uint64_t seed) {
  virtual_memory memory;
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  coretry::testing::seeded_random jitter(seed), faults(seed ^ 0x5eed);
  coretry::token_bucket_budget budget;
  coretry::retry_counters counters;
  coretry::retry_options options;
  options.safety = coretry::repeat_safety::idempotent;
  options.budget = &budget;
  options.observer = &counters;
  options.random = &jitter;
  using context = coretry::attempt_context<coretry::testing::manual_clock>;
  auto dependency = [&](context) -> asio::awaitable<int> {
    coretry::testing::manual_timer work(co_await asio::this_coro::executor);
    const auto roll = faults.uniform(99);
    work.expires_after(std::chrono::milliseconds(roll < 10 ? 10'000 : 5 + faults.uniform(80)));
    co_await work.async_wait(asio::use_awaitable);
    if (roll < 20) throw boost::system::system_error(asio::error::connection_reset);
    co_return roll < 35 ? 503 : roll < 40 ? 429 : roll < 43 ? 404 : 200;
  };
  auto classify = [](const boost::system::error_code& ec, int status) {
    if (ec) return coretry::classify_error(ec);
    if (status == 200) return coretry::verdict::success();
    if (status == 429) return coretry::verdict::transient("http_429", coretry::delivery::answered, 300ms);
    if (status == 503) return coretry::verdict::transient("http_503", coretry::delivery::answered);
    return coretry::verdict::permanent("http_4xx");
  };
  const auto end = runner.now() + std::chrono::duration_cast<coretry::duration>(std::chrono::duration<double, std::ratio<3600>>(hours));
  const auto half = runner.now() + (end - runner.now()) / 2;
  coretry::testing::manual_timer pacing(io);
  std::function<void(boost::system::error_code)> start_one = [&](boost::system::error_code) {
    if (memory.at_half < 0 && runner.now() >= half) memory.at_half = resident_kib();
    if (runner.now() >= end) {
      memory.at_end = resident_kib();
      return;
    }
    coretry::async_retry<coretry::testing::manual_timer>(io.get_executor(), coretry::policy{}, options, dependency,
                                                         classify, [](std::exception_ptr e, coretry::outcome<int>) {
                                                           if (e) std::rethrow_exception(e);
                                                         });
    pacing.expires_after(100ms);
    pacing.async_wait(start_one);
  };
  start_one({});
  const auto real_start = std::chrono::steady_clock::now();
  runner.run();
  std::printf("virtual time: %.2f h simulated in %.1f s of real time\n", hours,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - real_start).count());
  print_counters("virtual time", counters);
  std::printf("virtual time: %ld KiB resident at half time, %ld KiB at the end (%+ld KiB in the second half)\n",
              memory.at_half, memory.at_end, memory.at_end - memory.at_half);
  return memory;
}

void real_phase(int seconds, std::uint64_t seed) {
  asio::io_context server_io(1);
  auto guard = asio::make_work_guard(server_io);
  coretry::faults::fault_server server(server_io);
  std::thread server_thread([&] { server_io.run(); });
  const std::vector<std::string> targets = {
      "/status/200", "/status/503", "/status/429?retry-after=0", "/status/404", "/status/200?delay=300",
      "/status/200?drip=10:10", "/status/200?hang-after-headers", "/status/200?close", "/status/200?reset"};

  asio::io_context io(2);
  coretry::http::client client(io.get_executor());
  coretry::token_bucket_budget budget;
  coretry::retry_counters counters;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (int loop = 0; loop < 32; ++loop) {
    asio::co_spawn(asio::make_strand(io), [&, loop]() -> asio::awaitable<void> {
      std::mt19937_64 random(seed + static_cast<std::uint64_t>(loop));
      asio::steady_timer cancel_timer(co_await asio::this_coro::executor);
      while (std::chrono::steady_clock::now() < end) {
        coretry::http::request_options options;
        options.policy.overall_deadline = 800ms;
        options.policy.attempt_limit = 200ms;
        options.policy.min_attempt_allowance = 50ms;
        options.policy.completion_reserve = 10ms;
        options.budget = random() % 2 ? &budget : nullptr;
        options.observer = &counters;
        options.route = "/soak";
        asio::cancellation_signal cancel;
        const bool cancel_it = random() % 5 == 0;
        if (cancel_it) {
          cancel_timer.expires_after(std::chrono::milliseconds(random() % 300));
          cancel_timer.async_wait([&](boost::system::error_code ec) {
            if (!ec) cancel.emit(asio::cancellation_type::terminal);
          });
        }
        co_await client.async_send(server.base_url() + targets[random() % targets.size()],
                                   coretry::http::request(beast_http::verb::get, "", 11), options,
                                   asio::bind_cancellation_slot(cancel.slot(), asio::use_awaitable));
        cancel_timer.cancel();
        // Let the cancelled wait's handler run before `cancel` goes out of scope.
        co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
      }
    }, asio::detached);
  }
  std::thread helper([&] { io.run(); });
  io.run();
  helper.join();
  client.close_idle();
  server.stop();
  guard.reset();
  server_thread.join();
  print_counters("real time", counters);
}

} // namespace

int main(int argc, char** argv) {
  const double hours = argc > 1 ? std::atof(argv[1]) : 1.0;
  const int seconds = argc > 2 ? std::atoi(argv[2]) : 180;
  const std::uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : std::random_device{}();
  if (!(hours >= 0) || seconds < 0) {
    std::fprintf(stderr, "usage: bench_soak [virtual-hours>=0] [real-seconds>=0] [seed]\n");
    return 2;
  }
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const long memory_start = resident_kib();
  const std::size_t fds_start = open_descriptors();
  std::printf("start: %ld KiB resident, %zu open descriptors\n", memory_start, fds_start);
  virtual_memory memory;
  if (hours > 0) memory = virtual_phase(hours, seed);
  const long memory_middle = resident_kib();
  if (seconds > 0) real_phase(seconds, seed);
  const long memory_end = resident_kib();
  const std::size_t fds_end = open_descriptors();
  std::printf("end: %ld KiB resident (%ld after the virtual phase; peak %ld), %zu open descriptors\n", memory_end,
              memory_middle, status_kib("VmHWM"), fds_end);

  int status = 0;
  if (fds_end != fds_start) {
    std::printf("FAIL: %zu descriptors open at the end, %zu at the start\n", fds_end, fds_start);
    status = 1;
  }
  if (hours > 0) {
    const long growth = memory.at_end - memory.at_half;
    if (memory.at_half < 0 || memory.at_end < 0) {
      std::printf("FAIL: VmRSS could not be read from /proc/self/status\n");
      status = 1;
    } else if (growth > leak_bound_kib) {
      std::printf("FAIL: the second half of the virtual phase grew VmRSS by %ld KiB (bound %ld KiB)\n", growth,
                  leak_bound_kib);
      status = 1;
    } else {
      std::printf("PASS: the second half of the virtual phase grew VmRSS by %ld KiB (bound %ld KiB)\n", growth,
                  leak_bound_kib);
    }
  }
  if (fds_end == fds_start) std::printf("PASS: %zu descriptors open at the start and at the end\n", fds_end);
  return status;
}
