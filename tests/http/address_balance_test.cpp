// The address book's balancer without sockets, on virtual time (instants
// are given, never read) and seeded draws: which names are balanced, the
// pick's exclusions (ejected, used by the operation), requests in flight
// and answers as costs, a returning address's new connection and slow start,
// a new connection's order led by the pick.

#include "address_book.hpp"

#include <coretry/http/addresses.hpp>
#include <coretry/random.hpp>
#include <coretry/testing/random.hpp>

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using endpoint = boost::asio::ip::tcp::endpoint;
using time_point = std::chrono::steady_clock::time_point;
using book_type = coretry::http::detail::basic_address_book<time_point>;
using coretry::http::balance_mode;
using coretry::http::detail::name_and_port;

const time_point start = time_point{} + 1000h;
const name_and_port fleet_name{"pricing", "8080"};

endpoint at(const char* address) { return {boost::asio::ip::make_address(address), 8080}; }

const std::vector<endpoint> four{at("127.0.0.2"), at("127.0.0.3"), at("127.0.0.4"), at("127.0.0.5")};

coretry::http::outlier_ejection eject_after(unsigned failures) {
  coretry::http::outlier_ejection e;
  e.consecutive_failures = failures;
  return e;
}

/// `n` requests, one every `gap` from `from`, each to the book's pick,
/// answered after `latency`; how many each address got.
std::map<std::string, int> run(book_type& book, int n, time_point from, std::chrono::nanoseconds gap,
                               std::chrono::nanoseconds latency = 5ms) {
  std::map<std::string, int> counts;
  for (int i = 0; i < n; ++i) {
    const time_point now = from + gap * i;
    const auto picked = book.pick(fleet_name, {}, now);
    REQUIRE(picked);
    REQUIRE(book.request_started(fleet_name, *picked));
    book.request_ended(fleet_name, *picked, latency, now + latency);
    ++counts[picked->address().to_string()];
  }
  return counts;
}

} // namespace

TEST_CASE("address balance: only a name of several addresses in least_cost is balanced") {
  coretry::testing::seeded_random draws{7};
  book_type one(1h, eject_after(5), balance_mode::least_cost, draws);
  one.pin(fleet_name, {at("127.0.0.2")});
  CHECK_FALSE(one.pick(fleet_name, {}, start));
  CHECK_FALSE(one.request_started(fleet_name, at("127.0.0.2")));
  CHECK(one.stats(start).spread.empty());

  book_type first(1h, eject_after(5), balance_mode::first_to_connect, draws);
  first.pin(fleet_name, four);
  CHECK_FALSE(first.pick(fleet_name, {}, start));
  CHECK(first.order(fleet_name, {}, start) == four);
  CHECK(first.stats(start).spread.empty());

  book_type many(1h, eject_after(5), balance_mode::least_cost, draws);
  many.pin(fleet_name, four);
  CHECK(many.pick(fleet_name, {}, start));
  CHECK(many.stats(start).spread.size() == 4);
  CHECK_FALSE(many.pick({"other", "8080"}, {}, start)); // not in the book
  // A lookup that leaves one address ends the balancing.
  many.store({"looked-up", "80"}, {at("127.0.0.2"), at("127.0.0.3")}, start);
  CHECK(many.stats(start).spread.size() == 6);
  many.store({"looked-up", "80"}, {at("127.0.0.3")}, start + 1s);
  CHECK(many.stats(start).spread.size() == 4);
}

TEST_CASE("address balance: equal addresses share the picks and an ejected or used one is left out") {
  coretry::testing::seeded_random draws{7};
  book_type book(1h, eject_after(2), balance_mode::least_cost, draws);
  book.pin(fleet_name, four);
  auto counts = run(book, 4000, start, 1ms);
  for (const auto& e : four) CHECK(std::abs(counts[e.address().to_string()] - 1000) <= 150);

  book.failed(fleet_name, at("127.0.0.3"), start + 10s);
  book.failed(fleet_name, at("127.0.0.3"), start + 10s);
  REQUIRE(book.stats(start + 10s).ejected == 1);
  counts = run(book, 3000, start + 10s, 1ms);
  CHECK(counts["127.0.0.3"] == 0);
  CHECK(counts["127.0.0.2"] > 800);

  const std::array<endpoint, 2> used{at("127.0.0.2"), at("127.0.0.4")};
  for (int i = 0; i < 200; ++i) CHECK(*book.pick(fleet_name, used, start + 15s) == at("127.0.0.5"));
  // A new connection tries the pick first, then the others as before.
  CHECK(book.order(fleet_name, {}, start + 15s, at("127.0.0.4")) ==
        std::vector<endpoint>{at("127.0.0.4"), at("127.0.0.2"), at("127.0.0.5"), at("127.0.0.3")});
  // An ejected pick does not lead.
  CHECK(book.order(fleet_name, {}, start + 15s, at("127.0.0.3")).front() == at("127.0.0.2"));
}

TEST_CASE("address balance: requests in flight and slow answers make an address costly") {
  coretry::testing::seeded_random draws{7};
  book_type book(1h, eject_after(5), balance_mode::least_cost, draws);
  book.pin(fleet_name, four);
  const auto slow = at("127.0.0.4");
  REQUIRE(book.request_started(fleet_name, slow));
  book.request_ended(fleet_name, slow, 80ms, start);
  CHECK(book.cost(fleet_name, slow, start) == doctest::Approx(80e6));
  // The estimate decays by e every 10 s.
  CHECK(book.cost(fleet_name, slow, start + 10s) == doctest::Approx(80e6 / std::exp(1.0)));
  REQUIRE(book.request_started(fleet_name, slow));
  CHECK(book.cost(fleet_name, slow, start) == doctest::Approx(80e6 * std::sqrt(2.0)));
  auto seen = book.stats(start).spread;
  REQUIRE(seen.size() == 4);
  CHECK(seen[2].requests == 2);
  CHECK(seen[2].outstanding == 1);
  book.request_ended(fleet_name, slow, std::nullopt, start); // no answer: no sample
  CHECK(book.cost(fleet_name, slow, start) == doctest::Approx(80e6));

  // The others answer in 5 ms: the slow one is left out while its estimate
  // stays above theirs, for the balancer's resample_after (1,000) requests
  // to the others; then one request tries it.
  auto counts = run(book, 1000, start, 1ms);
  CHECK(counts["127.0.0.4"] == 0);
  counts = run(book, 20, start + 1s, 1ms);
  CHECK(counts["127.0.0.4"] >= 1);
}

TEST_CASE("address balance: an address back from its ejection is picked until a new connection tries it, then starts slow") {
  coretry::testing::seeded_random draws{7};
  book_type book(1h, eject_after(1), balance_mode::least_cost, draws);
  book.pin(fleet_name, four);
  run(book, 400, start, 1ms);
  book.failed(fleet_name, at("127.0.0.3"), start + 1s);
  const time_point back = start + 1s + 30s;
  (void)run(book, 100, back - 200ms, 1ms); // the others stay sampled
  // Its time is up: the next picks are it until a new connection has
  // tried it (order() puts it first, once).
  const auto returned = book.pick(fleet_name, {}, back);
  CHECK(returned == at("127.0.0.3"));
  CHECK(book.pick(fleet_name, {}, back) == at("127.0.0.3"));
  CHECK(book.order(fleet_name, {}, back, returned).front() == at("127.0.0.3"));
  // Then its weight ramps from 10% over 2 s: well under its fair share (a
  // quarter) over the first 500 ms, most of it after 2 s.
  auto counts = run(book, 500, back, 1ms);
  CHECK(counts["127.0.0.3"] < 125 / 2);
  counts = run(book, 1000, back + 2s, 1ms);
  CHECK(counts["127.0.0.3"] >= 250 / 2);
}

TEST_CASE("address balance: a request re-sent within its attempt is in flight again, not another request") {
  coretry::testing::seeded_random draws{7};
  book_type book(1h, eject_after(5), balance_mode::least_cost, draws);
  book.pin(fleet_name, four);
  const auto to = at("127.0.0.2");
  REQUIRE(book.request_started(fleet_name, to));
  book.request_ended(fleet_name, to, std::nullopt, start); // the pooled connection was closed
  REQUIRE(book.request_started(fleet_name, to, true));
  const auto seen = book.stats(start).spread;
  REQUIRE(seen.size() == 4);
  CHECK(seen[0].requests == 1);
  CHECK(seen[0].outstanding == 1);
}
