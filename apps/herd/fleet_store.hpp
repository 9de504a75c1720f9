#ifndef CORETRY_HERD_FLEET_STORE_HPP
#define CORETRY_HERD_FLEET_STORE_HPP

// The fleet's side of shared retry state, in the simulation: what Redis keeps
// and what coretry::redis::shared_state's exchange script
// (lib/src/redis/exchange_script.hpp) does with it, with the same arithmetic,
// on virtual time and without a network. One exchange is one run of the
// script: it is atomic and instantaneous.
//
// - The budget: one token bucket in millionths of a token, full when first
//   used; an exchange adds the process's deposits (capped at the capacity)
//   and grants min(want, whole tokens in the bucket).
// - The live processes: each exchange registers its process at `now`; a
//   process not heard from for `stale` is gone.
// - The gate's window: per-process requests and accepts counted in
//   `gate_buckets` buckets of `gate_width` (by the instant of the exchange
//   that brought them); an exchange answers the other processes' counts in
//   the current bucket and the gate_buckets - 1 before it. An exchange that
//   says "forget" (its gate opened after an outage) first empties the
//   current bucket and the gate_buckets before it, for every process.

#include <coretry/gate.hpp>
#include <coretry/policy.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace herd {

class fleet_store {
public:
  struct options {
    /// The bucket's capacity in millionths of a token.
    std::int64_t capacity_units = 20'000'000;
    /// Whether the fleet shares a budget (the script's ARGV[12]).
    bool budget = true;
    /// Width of one bucket of the gate's window (the gate's window / 10);
    /// zero: no gate.
    coretry::duration gate_width = std::chrono::seconds(1);
    /// Buckets in the gate's window.
    unsigned gate_buckets = coretry::gate_model::buckets;
    /// A process not heard from for this long is no longer live.
    coretry::duration stale = std::chrono::milliseconds(500);
  };
  /// What one process sends.
  struct request {
    unsigned process = 0;
    std::int64_t deposit_units = 0; ///< deposits since its last exchange
    unsigned want = 0;              ///< tokens wanted
    std::uint64_t requests = 0;     ///< gate results since its last exchange
    std::uint64_t accepts = 0;
    bool forget = false; ///< its gate opened since its last exchange
  };
  /// What the store answers.
  struct reply {
    unsigned granted = 0;
    unsigned live = 0;               ///< live processes, this one included
    std::uint64_t peer_requests = 0; ///< the other processes' results in the window
    std::uint64_t peer_accepts = 0;
    std::int64_t units_left = 0; ///< tokens left in the bucket, millionths (0 without a budget)
  };

  explicit fleet_store(const options& opts) : options_(opts) {}

  /// One exchange at `now`. Instants are cut to whole milliseconds, as
  /// Redis's TIME is in the script.
  reply exchange(coretry::duration now, const request& r);

  /// Tokens in the bucket (millionths), the capacity before the first exchange.
  std::int64_t units() const noexcept { return units_.value_or(options_.capacity_units); }
  const options& settings() const noexcept { return options_; }

private:
  struct counts {
    std::uint64_t requests = 0;
    std::uint64_t accepts = 0;
  };
  struct bucket {
    counts all;
    std::map<unsigned, counts> by_process;
  };
  options options_;
  std::optional<std::int64_t> units_;       // absent: never used (full)
  std::map<unsigned, std::int64_t> seen_;   // process -> last exchange, ms
  std::set<std::pair<std::int64_t, unsigned>> by_time_; // the same, by instant
  std::map<std::int64_t, bucket> window_;   // epoch -> counts
};

} // namespace herd

#endif
