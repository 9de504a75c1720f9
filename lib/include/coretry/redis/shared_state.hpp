#ifndef CORETRY_REDIS_SHARED_STATE_HPP
#define CORETRY_REDIS_SHARED_STATE_HPP
/// @file
/// One retry budget and one retry gate per dependency, shared by a fleet of
/// processes through Redis. See lib/docs/fleet.md.

#include <coretry/budget.hpp>
#include <coretry/gate.hpp>
#include <coretry/net/tls_files.hpp>
#include <coretry/policy.hpp>
#include <coretry/redis/url.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace coretry::redis {

/// Shares the budgets and gates of named dependencies with every process
/// that names the same Redis, prefix and dependency.
///
/// **The hot path never waits for Redis.** The budget (coretry::leased_budget)
/// and gate (coretry::local_gate) it hands out are local objects. A
/// reconciler, one coroutine on the given executor, looks every `period` at
/// each dependency and, when it has something to exchange (see
/// idle_period), runs one script (EVALSHA), which adds this
/// process's deposits to the fleet's token bucket and leases it up to
/// `max_lease` tokens, registers the process when it has the dependency's
/// gate, adds the gate results this process recorded since the last exchange
/// to the fleet's window and answers the other processes' counts in that
/// window and the number of live processes with that gate. The gate judges health on the fleet's counts, and spaces its
/// slots by the number of processes, so that the fleet lets through what one
/// gate would.
///
/// **Redis failing is a fault like any other.** An exchange that fails or
/// takes longer than `period`, a connection refused, lost (noticed at once,
/// between exchanges too) or not made within
/// `connect_timeout`, a TLS handshake that fails (told by its reason), a
/// refused AUTH (told by its code word): every budget and gate falls back to
/// local at once (the budget to its own bucket, the gate to its own window
/// and rate), the reconciler reconnects after coretry's backoff
/// (`reconnect`), and sharing resumes with the first exchange that succeeds.
///
/// Construct, add the dependencies (budget(), gate()), then start(). stop()
/// or destruction ends the reconciler (the budgets and gates stay usable,
/// local). Thread-safe for the getters; budget() and gate() before start().
class shared_state {
public:
  struct options {
    /// Where Redis is (server.tls: over TLS, verified against server.host),
    /// and AUTH's credentials (see read_credentials()).
    endpoint server;
    /// For a rediss:// server: the CA file, client certificate and key (and
    /// the key's password when it is encrypted), made into a context by
    /// net::make_client_context, the HTTP client's TLS files' type. Refused
    /// for a plain server (a CA file given for nothing is a mistake).
    using tls_files = net::tls_files;
    tls_files tls;
    /// First part of every key (1 to 64 of A-Z a-z 0-9 _ - . :).
    std::string prefix = "coretry";
    /// Time between two reconciliations, and the longest one exchange may
    /// take (1 ms to 60 s).
    duration period = std::chrono::milliseconds(50);
    /// A dependency with nothing to exchange (lease full, deposits the
    /// fleet's bucket has no room for, gate open with no new failures, no
    /// failures in the fleet) is exchanged only once per idle_period (1 ms
    /// to 60 s; `period` when that is longer): a healthy fleet costs Redis a few
    /// commands per process per idle_period, whatever its request rate.
    duration idle_period = std::chrono::milliseconds(250);
    /// The longest a connection (lookup, connect, TLS handshake, AUTH,
    /// SELECT) may take.
    duration connect_timeout = std::chrono::milliseconds(500);
    /// Waits between reconnection attempts (coretry's backoff, full jitter).
    backoff_policy reconnect{std::chrono::milliseconds(50), 2.0, std::chrono::seconds(1), jitter_kind::full};
    /// This process's name in the fleet (1 to 64 of A-Z a-z 0-9 _ - . :);
    /// empty: 16 random hexadecimal digits.
    std::string process_id;
    /// Told each new problem with Redis (a message not told since sharing
    /// last resumed; the last 8 are remembered), and when sharing resumes
    /// (an empty message). Called on the
    /// reconciler's executor. Never given a password.
    std::function<void(std::string_view)> on_problem;
  };

  /// Throws std::invalid_argument naming the bad option (a TLS file that
  /// cannot be used names the file).
  shared_state(boost::asio::any_io_executor ex, options opts);
  /// Stops the reconciler.
  ~shared_state();
  shared_state(const shared_state&) = delete;
  shared_state& operator=(const shared_state&) = delete;

  /// The shared budget of `dependency` (1 to 64 of A-Z a-z 0-9 _ - .).
  /// Throws std::invalid_argument for a bad name or options,
  /// std::logic_error after start() or when the name is already used.
  std::shared_ptr<leased_budget> budget(std::string_view dependency, const leased_budget::options& opts);
  /// The shared gate of `dependency`. Throws as budget() does. A dependency
  /// may have a budget, a gate or both.
  std::shared_ptr<local_gate> gate(std::string_view dependency, const local_gate::options& opts);

  /// Starts the reconciler (once).
  void start();
  /// Ends the reconciler: it stops at its next step, closes its connection
  /// and leaves every budget and gate local. Safe to call more than once.
  void stop() noexcept;

  /// Whether the last exchange succeeded (the budgets and gates are shared).
  bool up() const noexcept;
  /// How many times sharing was given up for local state (each fall back),
  /// counted by the time up() reads false for it.
  std::uint64_t fallbacks() const noexcept;
  /// Exchanges that succeeded, for metrics.
  std::uint64_t exchanges() const noexcept;
  /// The keys of `dependency`'s state begin with this:
  /// `PREFIX:{DEPENDENCY}:` (the hash tag keeps them on one cluster shard).
  std::string key_prefix(std::string_view dependency) const;

  struct impl;

private:
  std::shared_ptr<impl> impl_;
};

/// Why `prefix` cannot be shared_state::options::prefix, or nullopt.
std::optional<std::string> prefix_problem(std::string_view prefix);

} // namespace coretry::redis

#endif
