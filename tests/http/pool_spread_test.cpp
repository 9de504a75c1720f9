// The pool's choice for an origin spread over addresses, without sockets
// and on virtual time: an idle connection to the balancer's pick first,
// else a new one while the origin has room, else the one that suits to the
// cheapest address (the newest of equals); at the limit, the costliest
// address's idle connection is closed first.

#include "pool.hpp"

#include <coretry/testing/manual_clock.hpp>

#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;

/// A connection to one of addresses 0, 1, 2 that remembers its closing.
struct addressed_connection {
  addressed_connection(int n, int to, std::vector<int>& log) : id(n), address(to), closed(&log) {}
  bool is_stale() { return false; }
  void close() { closed->push_back(id); }
  int id;
  int address;
  std::vector<int>* closed;
};

using spread_pool = coretry::http::detail::basic_connection_pool<addressed_connection, coretry::testing::manual_clock>;
using spread_lease = spread_pool::lease;

/// What the attempt hands the pool: its pick and each address's cost.
struct toward {
  int pick;
  std::array<double, 3> costs{};
  bool active = true;
  bool preferred(const addressed_connection& c) const { return c.address == pick; }
  double cost(const addressed_connection& c) const { return costs[static_cast<std::size_t>(c.address)]; }
};

struct spread_harness {
  spread_harness()
      : runner(io), pool(io.get_executor(), 4, 30s, [this] { return runner.now(); }) {}

  /// A new connection to `address`, leased.
  spread_lease open(int address) {
    std::optional<spread_lease> held = pool.try_lease(origin);
    REQUIRE(held);
    REQUIRE_FALSE(held->get());
    held->attach(std::make_unique<addressed_connection>(next_id++, address, closed));
    return std::move(*held);
  }

  std::optional<spread_lease> lease(const toward& t, bool suit = true) {
    return pool.try_lease(origin, [suit](const addressed_connection&) { return suit; }, t);
  }

  boost::asio::io_context io;
  coretry::testing::manual_runner runner;
  std::vector<int> closed;
  int next_id = 1;
  spread_pool pool;
  const std::string origin = "http://pricing:80";
};

int id_of(const std::optional<spread_lease>& l) { return l && l->get() ? l->get()->id : 0; }

} // namespace

TEST_CASE("pool spread: the pick's idle connection first, else a new one while there is room, else the newest of equal costs") {
  spread_harness h;
  {
    // Idle, oldest first: 1 to address 0, 2 to address 1, 3 to address 0.
    std::optional<spread_lease> one(h.open(0)), two(h.open(1)), three(h.open(0));
    for (auto* l : {&one, &two, &three}) {
      (*l)->mark_reusable();
      l->reset();
    }
  }
  std::optional<spread_lease> got = h.lease({.pick = 1});
  CHECK(id_of(got) == 2); // to the pick, not the newest
  got->mark_reusable();
  got.reset(); // idle now: 1, 3, 2

  // No idle connection to the pick and room for one: a new connection.
  std::optional<spread_lease> fresh = h.lease({.pick = 2});
  REQUIRE(fresh);
  CHECK(fresh->get() == nullptr);
  CHECK(h.pool.stats().idle == 3);
  fresh->attach(std::make_unique<addressed_connection>(4, 2, h.closed));

  // At the limit (one leased, three idle), costs equal: the newest that suits.
  std::optional<spread_lease> again = h.lease({.pick = 2});
  CHECK(id_of(again) == 2);
  again->mark_reusable();
  again.reset();

  // At the limit with none that suits: the costliest address's idle
  // connection is closed (2, to address 1), not the oldest (1).
  std::optional<spread_lease> permit = h.lease({.pick = 2, .costs = {1e6, 9e6, 0}}, false);
  REQUIRE(permit);
  CHECK(permit->get() == nullptr);
  CHECK(h.closed == std::vector<int>{2});
  permit.reset();
  // Of equal costs, the oldest.
  std::optional<spread_lease> second = h.lease({.pick = 2}, false);
  REQUIRE(second);
  CHECK(h.closed == std::vector<int>{2});
  std::optional<spread_lease> held = h.lease({.pick = 2}, false); // limit: 4 leased + idle 1, 3
  CHECK(h.closed == std::vector<int>{2, 1});
  CHECK(h.pool.stats().idle == 1);
  CHECK(h.pool.stats().leased == 3);
  (void)held;
}

TEST_CASE("pool spread: at the limit with no idle connection to the pick, the cheapest address's is taken") {
  spread_harness h;
  std::optional<spread_lease> held_one(h.open(2)), held_two(h.open(2));
  {
    // Idle, oldest first: 1 to address 0 (cheap), 2 to address 1 (costly).
    std::optional<spread_lease> cheap(h.open(0)), costly(h.open(1));
    for (auto* l : {&cheap, &costly}) {
      (*l)->mark_reusable();
      l->reset();
    }
  }
  REQUIRE(h.pool.stats().idle == 2);
  // Full (two leased, two idle), the pick (address 2) has none idle.
  std::optional<spread_lease> got = h.lease({.pick = 2, .costs = {1e6, 9e6, 5e5}});
  CHECK(id_of(got) == 3);
  CHECK(h.closed.empty());
}
