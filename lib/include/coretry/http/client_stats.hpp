#ifndef CORETRY_HTTP_CLIENT_STATS_HPP
#define CORETRY_HTTP_CLIENT_STATS_HPP
/// @file
/// What a client counts (pool_stats; the addresses' counters are
/// address_stats, in addresses.hpp).

#include <cstddef>
#include <cstdint>

namespace coretry::http {

/// Connection pool counters, for tests and metrics.
struct pool_stats {
  std::size_t open = 0;    ///< leased + idle
  std::size_t idle = 0;
  std::size_t leased = 0;
  std::size_t waiting = 0; ///< attempts waiting for a connection
  std::uint64_t connections_opened = 0;
  std::uint64_t stale_discarded = 0; ///< idle connections found closed by the server (or holding stray bytes)
  std::uint64_t lookups = 0;         ///< host-name lookups started (an IP-address host needs none)
};

} // namespace coretry::http

#endif
