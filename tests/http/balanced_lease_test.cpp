// An attempt's lease for a balanced name, without sockets and on virtual
// time: the address book's pick and the pool's choice toward it together
// (balanced_lease.hpp), as an attempt asks for a connection. Its names are
// in a namespace of their own: the suite is a unity build.

#include "address_book.hpp"
#include "balanced_lease.hpp"
#include "pool.hpp"

#include <coretry/http/addresses.hpp>
#include <coretry/random.hpp>
#include <coretry/testing/random.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace balanced_lease_tests {

using namespace std::chrono_literals;
using endpoint = boost::asio::ip::tcp::endpoint;
using coretry::testing::manual_clock;
using book_type = coretry::http::detail::basic_address_book<manual_clock::time_point>;
using coretry::http::balance_mode;
using coretry::http::detail::name_and_port;

const name_and_port fleet_name{"pricing", "8080"};

endpoint at(const char* address) { return {boost::asio::ip::make_address(address), 8080}; }

/// A connection to `peer` that remembers its closing.
struct peered_connection {
  peered_connection(int n, endpoint to, std::vector<int>& log) : id(n), peer(to), closed(&log) {}
  bool is_stale() { return false; }
  void close() { closed->push_back(id); }
  int id;
  endpoint peer;
  std::vector<int>* closed;
};

using pool_type = coretry::http::detail::basic_connection_pool<peered_connection, manual_clock>;

/// A book of `addresses` (ejected at their first failure) and a pool of at
/// most `limit` connections per origin, idle ones kept for an hour.
struct harness {
  harness(std::vector<endpoint> addresses, std::size_t limit)
      : runner(io), book(1h, eject_after_one(), balance_mode::least_cost, draws),
        pool(io.get_executor(), limit, 1h, [this] { return runner.now(); }) {
    book.pin(fleet_name, std::move(addresses));
  }

  static coretry::http::outlier_ejection eject_after_one() {
    coretry::http::outlier_ejection e;
    e.consecutive_failures = 1;
    return e;
  }

  /// What an attempt asks for now; `pick` is the balancer's choice.
  std::optional<pool_type::lease> lease(std::optional<endpoint>& pick) {
    return coretry::http::detail::lease_toward_pick(book, pool, origin, fleet_name, {}, runner.now(), pick);
  }

  /// A connection to each of `to`, made on permits and given back idle.
  void idle_connections(const std::vector<endpoint>& to) {
    std::vector<pool_type::lease> held;
    for (const endpoint& peer : to) {
      std::optional<pool_type::lease> one = pool.try_lease(origin);
      REQUIRE(one);
      REQUIRE_FALSE(one->get());
      one->attach(std::make_unique<peered_connection>(next_id++, peer, closed));
      one->mark_reusable();
      held.push_back(std::move(*one));
    }
  }

  boost::asio::io_context io;
  coretry::testing::manual_runner runner;
  coretry::testing::seeded_random draws{11};
  book_type book;
  std::vector<int> closed;
  int next_id = 1;
  pool_type pool;
  const std::string origin = "http://pricing:8080";
};

TEST_CASE("balanced lease: an address back from its ejection gets a new connection when the pool is full") {
  const endpoint a = at("127.0.0.2");
  const endpoint b = at("127.0.0.3");
  harness h({a, b}, 1);
  h.runner.run_for(1h);
  h.book.failed(fleet_name, b, h.runner.now());
  REQUIRE(h.book.stats(h.runner.now()).ejected == 1);
  h.idle_connections({a}); // the pool is full: one idle connection, to A
  REQUIRE(h.pool.stats().idle == 1);

  // Its ejection ends: the next request goes to B, on a new connection (A's
  // idle one is closed to make room), and the connection tries B first.
  h.runner.run_for(30s);
  std::optional<endpoint> pick;
  std::optional<pool_type::lease> got = h.lease(pick);
  REQUIRE(got);
  CHECK(pick == b);
  CHECK(got->get() == nullptr);
  CHECK(h.closed == std::vector<int>{1});
  CHECK(h.book.order(fleet_name, {}, h.runner.now(), pick).front() == b);
}

} // namespace balanced_lease_tests

namespace balanced_lease_tests {

TEST_CASE("balanced lease: an address back from its ejection served on a pooled connection is tried: the others' "
          "connections suit again") {
  const endpoint a = at("127.0.0.2");
  const endpoint b = at("127.0.0.3");
  harness h({a, b}, 2);
  h.runner.run_for(1h);
  h.idle_connections({a, b}); // B's kept idle while it is ejected
  h.book.failed(fleet_name, b, h.runner.now());
  h.runner.run_for(30s);
  std::optional<endpoint> pick;
  std::optional<pool_type::lease> got = h.lease(pick);
  REQUIRE(got);
  CHECK(pick == b);
  REQUIRE(got->get() != nullptr);
  CHECK(got->get()->peer == b);
  // The request goes on it: B has been tried, as a new connection would
  // have tried it; the balancer picks from now on.
  REQUIRE(h.book.request_started(fleet_name, b));
  CHECK(h.book.suits(fleet_name, a, {}, h.runner.now()));
  h.book.request_ended(fleet_name, b, std::chrono::milliseconds(5), h.runner.now());
}

} // namespace balanced_lease_tests
