#ifndef CORETRY_PHASES_HPP
#define CORETRY_PHASES_HPP

// Where one attempt's time went in a transport, phase by phase: the HTTP
// client records them (coretry::http::exchange::phases). Part of the engine's
// headers, needing no transport, so that an observer (the Prometheus one) can
// record them without depending on the transport.

#include <coretry/policy.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace coretry {

/// The phases of one attempt over a connection (HTTP's), in the order an
/// attempt goes through them.
enum class phase : std::uint8_t {
  pool_wait,  ///< waiting for a pooled connection or a permit to open one
  lookup,     ///< the host-name lookup (none for an IP-address host)
  connect,    ///< the TCP connect
  tls,        ///< the TLS handshake (https only)
  write,      ///< writing the request
  first_byte, ///< from the request written to the first byte of a response
  read,       ///< from that first byte to the complete final response
};

inline constexpr std::size_t phase_count = 7;

/// "pool_wait", "lookup", "connect", "tls", "write", "first_byte", "read":
/// the names the metrics and the command line use.
constexpr std::string_view to_string(phase p) noexcept {
  constexpr std::array<std::string_view, phase_count> names{"pool_wait", "lookup",     "connect", "tls",
                                                            "write",     "first_byte", "read"};
  const auto i = static_cast<std::size_t>(p);
  return i < phase_count ? names[i] : std::string_view{"unknown"};
}

/// The time one attempt spent in each phase it reached. The phases follow one
/// another without a gap, from the attempt's first step (asking the pool) to
/// its end, so their sum is the attempt's time as the transport saw it: never
/// more than the engine's record of the attempt (`end - start`), which also
/// counts starting and completing it.
///
/// A phase the attempt did not reach has no time: a reused connection has no
/// lookup, connect or tls; an IP-address host no lookup; plain http no tls.
/// A failed attempt's last phase lasted until the attempt ended (a server
/// that never answered shows as a long `first_byte`).
///
/// Recorded with one clock read per change of phase, none per read of the
/// connection: `enter` and `finish` are given the time and read no clock.
class phase_timings {
public:
  using clock = std::chrono::steady_clock;

  /// The time spent in `p`, or nullopt when the attempt never reached it.
  std::optional<duration> operator[](phase p) const noexcept {
    if (!reached(p)) return std::nullopt;
    return spent_[static_cast<std::size_t>(p)];
  }
  bool reached(phase p) const noexcept { return (reached_ & bit(p)) != 0; }
  /// No phase reached: the attempt ended before asking for a connection (a
  /// request body that could not be reproduced).
  bool empty() const noexcept { return reached_ == 0; }
  /// The sum of the phases reached.
  duration total() const noexcept {
    duration sum{};
    for (const duration d : spent_) sum += d;
    return sum;
  }
  /// The phase running now (the last one entered), if any.
  std::optional<phase> running() const noexcept {
    if (!running_) return std::nullopt;
    return current_;
  }

  /// Ends the running phase at `now` and starts `next`. A phase entered again
  /// (within one attempt, a pooled connection the server had closed is
  /// replaced by a new one) adds to its time. A `now` earlier than the
  /// previous change counts as no time.
  void enter(phase next, clock::time_point now) noexcept {
    stop(now);
    current_ = next;
    since_ = now;
    running_ = true;
    reached_ |= bit(next);
  }
  /// Ends the running phase at `now`; nothing runs afterwards.
  void finish(clock::time_point now) noexcept {
    stop(now);
    running_ = false;
  }

private:
  static constexpr std::uint8_t bit(phase p) noexcept {
    return static_cast<std::uint8_t>(1u << static_cast<unsigned>(p));
  }
  void stop(clock::time_point now) noexcept {
    if (running_ && now > since_) spent_[static_cast<std::size_t>(current_)] += now - since_;
  }

  std::array<duration, phase_count> spent_{};
  std::uint8_t reached_ = 0;
  phase current_ = phase::pool_wait;
  bool running_ = false;
  clock::time_point since_{};
};

/// One attempt's phases, reported when its exchange with the server ends
/// (before the engine classifies the attempt).
struct attempt_phases_event {
  std::string_view route;      ///< the request's route template (http::request_options::route)
  unsigned attempt;            ///< 1 for the initial attempt
  const phase_timings& phases;
  bool reused_connection;      ///< false when the attempt opened its connection (or got none)
  bool complete;               ///< a complete final response arrived
};

/// Told each attempt's phase timings (http::request_options::phases), on
/// the operation's executor. Methods must not throw and should be cheap: they
/// run on the request's path. An observer shared by requests on several
/// threads must be thread-safe.
class phase_observer {
public:
  virtual ~phase_observer() = default;
  virtual void attempt_phases(const attempt_phases_event& e) noexcept = 0;
};

} // namespace coretry

#endif
