#ifndef CORETRY_SRC_HTTP_BALANCED_LEASE_HPP
#define CORETRY_SRC_HTTP_BALANCED_LEASE_HPP

// An attempt's lease from the pool: for a name whose requests the balancer
// spreads, its pick first (address_health::pick), then the pool's choice
// toward it (pool.hpp's try_lease with a spread: an idle connection to the
// pick, a new one while there is room, ...), each idle connection judged by
// whether it suits the attempt and by its address's cost. Generic over the
// health (anything with pick, suits and cost, as address_health and the
// address book have), the pool and the clock, so that it runs without
// sockets on virtual time. Internal to coretry::http.

#include "address_names.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <optional>
#include <span>
#include <string>

namespace coretry::http::detail {

/// The pool's view of the balancer's pick (pool.hpp's `spread`): a
/// connection's address is preferred when it is the pick, and costs what
/// the balancer says it does at `at`.
template <class Health, class TimePoint>
struct toward_pick {
  Health& health;
  name_and_port target;
  const std::optional<boost::asio::ip::tcp::endpoint>& pick;
  TimePoint at;
  bool active;
  template <class Connection>
  bool preferred(const Connection& c) const {
    return pick && c.peer == *pick;
  }
  template <class Connection>
  double cost(const Connection& c) const {
    return health.cost(target, c.peer, at);
  }
};

/// A lease of `key`'s pool for an attempt to `target` at `now` whose
/// operation used `avoid` (the latest last): `pick` is set to the
/// balancer's choice (none when `target` is not balanced), and the pool
/// asked toward it. None: the caller waits for a connection.
template <class Health, class Pool, class TimePoint>
std::optional<typename Pool::lease> lease_toward_pick(Health& health, Pool& pool, const std::string& key,
                                                      name_and_port target,
                                                      std::span<const boost::asio::ip::tcp::endpoint> avoid,
                                                      TimePoint now,
                                                      std::optional<boost::asio::ip::tcp::endpoint>& pick) {
  pick = health.pick(target, avoid, now);
  return pool.try_lease(
      key, [&](const auto& c) { return health.suits(target, c.peer, avoid, now); },
      toward_pick<Health, TimePoint>{health, target, pick, now, pick.has_value()});
}

} // namespace coretry::http::detail

#endif
