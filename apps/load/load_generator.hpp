#ifndef CORETRY_LOAD_GENERATOR_HPP
#define CORETRY_LOAD_GENERATOR_HPP

// An open-loop HTTP/1.1 load generator: requests arrive as a Poisson process
// at each phase's rate, whatever the answers do. A request due while no
// kept-alive connection is free opens a new one, up to plan::connections;
// beyond that it is counted as not sent, never delayed. Each request has
// plan::timeout from its arrival (connecting included); latency is measured
// from the arrival, so a late start counts against the server's answer, not
// for it. Every window of plan::window reports what happened in it.

#include "load/load_options.hpp"

#include <boost/asio/io_context.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <vector>

namespace coretry::load {

/// The arrival times of a Poisson process whose rate changes from phase to
/// phase (piecewise constant), from a seed: the same seed gives the same
/// times on every platform.
class arrival_schedule {
public:
  arrival_schedule(std::vector<phase> phases, std::uint64_t seed);

  struct arrival {
    std::chrono::nanoseconds at; ///< since the start
    std::size_t phase;           ///< index into the phases
  };
  /// The next arrival, or nullopt once the last phase is over.
  std::optional<arrival> next();
  /// When the phase `index` begins (the end of the last phase for phases.size()).
  std::chrono::nanoseconds phase_start(std::size_t index) const;

private:
  double uniform(); // in [0, 1)

  std::vector<phase> phases_;
  std::vector<double> starts_; // seconds, one more than phases_
  std::mt19937_64 random_;
  std::size_t phase_ = 0;
  double now_ = 0; // seconds since the start
};

/// Latencies in microseconds, in buckets of about 3% (32 to each power of
/// two); fixed size whatever the count.
class latency_histogram {
public:
  void add(std::chrono::nanoseconds latency);
  std::uint64_t count() const { return count_; }
  /// The q-quantile (0 < q <= 1) in milliseconds, the middle of its bucket; nullopt when empty.
  std::optional<double> quantile_ms(double q) const;
  void clear();

private:
  static constexpr std::size_t buckets = 36 * 32;
  std::array<std::uint64_t, buckets> counts_{};
  std::uint64_t count_ = 0;
};

/// What happened in one window (or, for the summary, the whole run). Answers,
/// timeouts and errors are counted in the window in which they happen;
/// requests sent and not sent in the one in which they arrived.
struct window_report {
  std::size_t index = 0;          ///< 0 for the first window
  std::chrono::nanoseconds start{};  ///< since the run started
  std::chrono::nanoseconds length{}; ///< the last window may be shorter
  std::size_t phase = 0;          ///< the phase at the window's start (phases.size() once they are over)
  double rate = 0;                ///< that phase's rate (0 after the last)
  std::uint64_t sent = 0;
  std::uint64_t not_sent = 0;     ///< arrived while every connection was busy
  std::uint64_t status_200 = 0;
  std::uint64_t status_503 = 0;
  std::uint64_t status_504 = 0;
  std::uint64_t status_other = 0;
  std::uint64_t timeouts = 0;     ///< no whole answer within the timeout
  std::uint64_t errors = 0;       ///< transport errors: refused, reset, closed, malformed answers
  std::uint64_t non200_fast = 0;  ///< answers other than 200 that came within 10 ms
  std::optional<double> p50_ms;   ///< of the 200s' latencies
  std::optional<double> p99_ms;
  std::size_t connections = 0;    ///< open at the window's end
  std::size_t outstanding = 0;    ///< requests sent and not yet ended, at the window's end
  double max_lag_ms = 0;          ///< how late the generator sent behind the schedule, at worst

  std::uint64_t answered() const { return status_200 + status_503 + status_504 + status_other; }
  /// 200s per second.
  double goodput() const;
  /// Of the answers other than 200, the share that came within 10 ms; nullopt with none.
  std::optional<double> non200_fast_share() const;
};

struct run_summary {
  window_report totals; ///< the whole run as one window
  std::uint64_t seed = 0;
  double cpu_seconds = 0; ///< the process's user and system time
};

using window_sink = std::function<void(const window_report&)>;

/// Resolves the plan's host (once, on this thread), then runs the load on
/// `io` until every phase is over and every request has ended (each within
/// its timeout), calling `sink` at the end of each window. Other work may
/// share `io`; it runs too, until the load is done. `stop`, if set, is
/// polled: once true, no more requests are sent. Throws
/// boost::system::system_error if the host cannot be resolved.
run_summary run_load(boost::asio::io_context& io, const plan& load, const window_sink& sink,
                     const std::function<bool()>& stop = {});

} // namespace coretry::load

#endif
