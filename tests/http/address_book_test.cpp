// The address book's rules without sockets: the order a new connection tries
// addresses in, which pooled connection suits a retry, ejection and return,
// and when a name is looked up again. Times are given, never read.

#include "address_book.hpp"

#include <coretry/http/addresses.hpp>

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using endpoint = boost::asio::ip::tcp::endpoint;
using time_point = std::chrono::steady_clock::time_point;
using book_type = coretry::http::detail::basic_address_book<time_point>;
using coretry::http::detail::name_and_port;

const time_point t0 = time_point{} + 1000h;
const name_and_port pricing{"pricing", "8080"};

endpoint ep(const char* address, unsigned short port = 8080) { return {boost::asio::ip::make_address(address), port}; }

std::vector<endpoint> order(book_type& book, std::vector<endpoint> avoid = {}, time_point now = t0) {
  return book.order(pricing, avoid, now);
}

coretry::http::outlier_ejection ejection(unsigned consecutive = 5) {
  coretry::http::outlier_ejection e;
  e.consecutive_failures = consecutive;
  return e;
}

void fail(book_type& book, const endpoint& at, int times, time_point now = t0) {
  for (int i = 0; i < times; ++i) book.failed(pricing, at, now);
}

} // namespace

TEST_CASE("address book: families alternate, starting with the first address's (RFC 8305)") {
  using coretry::http::detail::interleave_families;
  const std::vector<endpoint> mixed{ep("::1"), ep("fd00::2"), ep("fd00::3"), ep("127.0.0.2"), ep("127.0.0.3")};
  CHECK(interleave_families(mixed) ==
        std::vector<endpoint>{ep("::1"), ep("127.0.0.2"), ep("fd00::2"), ep("127.0.0.3"), ep("fd00::3")});
  const std::vector<endpoint> v4_first{ep("127.0.0.2"), ep("::1"), ep("127.0.0.3")};
  CHECK(interleave_families(v4_first) == std::vector<endpoint>{ep("127.0.0.2"), ep("::1"), ep("127.0.0.3")});
  CHECK(interleave_families({}).empty());
}

TEST_CASE("address book: a retry tries the addresses its operation has not used first") {
  book_type book(30s, ejection());
  book.pin(pricing, {ep("127.0.0.2"), ep("127.0.0.3"), ep("127.0.0.4")});
  CHECK(order(book) == std::vector<endpoint>{ep("127.0.0.2"), ep("127.0.0.3"), ep("127.0.0.4")});
  CHECK(order(book, {ep("127.0.0.2")}) == std::vector<endpoint>{ep("127.0.0.3"), ep("127.0.0.4"), ep("127.0.0.2")});
  CHECK(order(book, {ep("127.0.0.3"), ep("127.0.0.2")}) ==
        std::vector<endpoint>{ep("127.0.0.4"), ep("127.0.0.2"), ep("127.0.0.3")});
  // Every address used: only the one that just failed goes last.
  CHECK(order(book, {ep("127.0.0.2"), ep("127.0.0.4"), ep("127.0.0.3")}) ==
        std::vector<endpoint>{ep("127.0.0.2"), ep("127.0.0.4"), ep("127.0.0.3")});

  // A pooled connection suits unless another address is free of the same reproach.
  CHECK(book.suits(pricing, ep("127.0.0.2"), {}, t0));
  const std::array<endpoint, 1> used{ep("127.0.0.2")};
  CHECK_FALSE(book.suits(pricing, ep("127.0.0.2"), used, t0));
  CHECK(book.suits(pricing, ep("127.0.0.3"), used, t0));
  const std::array<endpoint, 3> all{ep("127.0.0.2"), ep("127.0.0.3"), ep("127.0.0.4")};
  CHECK(book.suits(pricing, ep("127.0.0.2"), all, t0));
  CHECK_FALSE(book.suits(pricing, ep("127.0.0.4"), all, t0)); // the latest failed: another first

  // One address: nothing to prefer.
  book_type single(30s, ejection());
  single.pin(pricing, {ep("127.0.0.2")});
  CHECK(single.suits(pricing, ep("127.0.0.2"), used, t0));
  CHECK(single.order(pricing, used, t0) == std::vector<endpoint>{ep("127.0.0.2")});
}

TEST_CASE("address book: five failures in a row eject an address, a success in between starts the count again") {
  book_type book(30s, ejection());
  book.pin(pricing, {ep("127.0.0.2"), ep("127.0.0.3"), ep("127.0.0.4")});
  fail(book, ep("127.0.0.2"), 4);
  book.succeeded(pricing, ep("127.0.0.2"));
  fail(book, ep("127.0.0.2"), 4);
  CHECK(book.stats(t0).ejected == 0);
  fail(book, ep("127.0.0.2"), 1);
  CHECK(book.stats(t0).ejected == 1);
  CHECK(book.stats(t0).ejections == 1);
  CHECK(order(book) == std::vector<endpoint>{ep("127.0.0.3"), ep("127.0.0.4"), ep("127.0.0.2")});
  CHECK_FALSE(book.suits(pricing, ep("127.0.0.2"), {}, t0));
  // Even an operation that used the others does not go back to it first.
  CHECK(order(book, {ep("127.0.0.3"), ep("127.0.0.4")}) ==
        std::vector<endpoint>{ep("127.0.0.3"), ep("127.0.0.4"), ep("127.0.0.2")});
}

TEST_CASE("address book: an ejected address returns after base x ejections, exactly") {
  book_type book(1h, ejection());
  book.pin(pricing, {ep("127.0.0.2"), ep("127.0.0.3")});
  fail(book, ep("127.0.0.2"), 5, t0);
  CHECK_FALSE(book.suits(pricing, ep("127.0.0.2"), {}, t0 + 30s - 1ns));
  CHECK(book.suits(pricing, ep("127.0.0.2"), {}, t0 + 30s));
  CHECK(book.stats(t0 + 30s).ejected == 0);
  CHECK(order(book, {}, t0 + 30s) == std::vector<endpoint>{ep("127.0.0.2"), ep("127.0.0.3")});
  // Back with a clean run: four more failures do not eject it; the fifth
  // does, for twice as long.
  const time_point t1 = t0 + 40s;
  fail(book, ep("127.0.0.2"), 4, t1);
  CHECK(book.stats(t1).ejected == 0);
  fail(book, ep("127.0.0.2"), 1, t1);
  CHECK_FALSE(book.suits(pricing, ep("127.0.0.2"), {}, t1 + 60s - 1ns));
  CHECK(book.suits(pricing, ep("127.0.0.2"), {}, t1 + 60s));
  CHECK(book.stats(t1 + 60s).ejections == 2);
  // Failures while ejected do not lengthen it.
  const time_point t2 = t1 + 100s;
  fail(book, ep("127.0.0.2"), 5, t2);
  fail(book, ep("127.0.0.2"), 20, t2 + 1s);
  CHECK(book.stats(t2 + 1s).ejections == 3);
  CHECK(book.suits(pricing, ep("127.0.0.2"), {}, t2 + 90s));
}

TEST_CASE("address book: an address back from its ejection gets the next new connection, once") {
  book_type book(1h, ejection());
  book.pin(pricing, {ep("127.0.0.2"), ep("127.0.0.3"), ep("127.0.0.4")});
  fail(book, ep("127.0.0.3"), 5, t0);
  CHECK(book.suits(pricing, ep("127.0.0.2"), {}, t0 + 29s));
  // Its time is up: pooled connections elsewhere do not suit until a new
  // connection has tried it (unless the operation already used it).
  CHECK_FALSE(book.suits(pricing, ep("127.0.0.2"), {}, t0 + 30s));
  CHECK(book.suits(pricing, ep("127.0.0.3"), {}, t0 + 30s));
  const std::array<endpoint, 1> used{ep("127.0.0.3")};
  CHECK(book.suits(pricing, ep("127.0.0.2"), used, t0 + 30s));
  CHECK(order(book, {}, t0 + 30s) == std::vector<endpoint>{ep("127.0.0.3"), ep("127.0.0.2"), ep("127.0.0.4")});
  CHECK(book.suits(pricing, ep("127.0.0.2"), {}, t0 + 30s));
  CHECK(order(book, {}, t0 + 30s) == std::vector<endpoint>{ep("127.0.0.2"), ep("127.0.0.3"), ep("127.0.0.4")});
  // Ejected again before any connection tried it: nothing is forced.
  fail(book, ep("127.0.0.3"), 5, t0 + 40s);
  CHECK(book.suits(pricing, ep("127.0.0.2"), {}, t0 + 40s + 60s - 1ns));
  CHECK_FALSE(book.suits(pricing, ep("127.0.0.2"), {}, t0 + 40s + 60s));
  fail(book, ep("127.0.0.3"), 5, t0 + 101s);
  CHECK(book.suits(pricing, ep("127.0.0.2"), {}, t0 + 101s));
}

TEST_CASE("address book: the ejection time stops at its maximum") {
  coretry::http::outlier_ejection e = ejection(1);
  e.base_ejection_time = 100s;
  e.max_ejection_time = 250s;
  book_type book(1h, e);
  book.pin(pricing, {ep("127.0.0.2"), ep("127.0.0.3")});
  time_point now = t0;
  for (const auto expected : {100s, 200s, 250s, 250s}) {
    CAPTURE(expected.count());
    book.failed(pricing, ep("127.0.0.2"), now);
    CHECK_FALSE(book.suits(pricing, ep("127.0.0.2"), {}, now + expected - 1ns));
    CHECK(book.suits(pricing, ep("127.0.0.2"), {}, now + expected));
    now += expected;
  }
}

TEST_CASE("address book: at most half the addresses are ejected, one of two, none of one, never all") {
  CHECK(book_type(30s, ejection()).ejection_allowance(1) == 0);
  CHECK(book_type(30s, ejection()).ejection_allowance(2) == 1);
  CHECK(book_type(30s, ejection()).ejection_allowance(3) == 1);
  CHECK(book_type(30s, ejection()).ejection_allowance(4) == 2);
  coretry::http::outlier_ejection every = ejection();
  every.max_ejection_percent = 100;
  CHECK(book_type(30s, every).ejection_allowance(4) == 3);
  coretry::http::outlier_ejection envoy = ejection();
  envoy.max_ejection_percent = 10;
  CHECK(book_type(30s, envoy).ejection_allowance(3) == 1); // Envoy's 10% would eject none

  book_type book(30s, ejection());
  book.pin(pricing, {ep("127.0.0.2"), ep("127.0.0.3"), ep("127.0.0.4")});
  fail(book, ep("127.0.0.2"), 5);
  fail(book, ep("127.0.0.3"), 50);
  CHECK(book.stats(t0).ejected == 1);
  CHECK(order(book) == std::vector<endpoint>{ep("127.0.0.3"), ep("127.0.0.4"), ep("127.0.0.2")});

  book_type lonely(30s, ejection());
  lonely.pin(pricing, {ep("127.0.0.2")});
  lonely.failed(pricing, ep("127.0.0.2"), t0);
  fail(lonely, ep("127.0.0.2"), 50);
  CHECK(lonely.stats(t0).ejected == 0);
  CHECK(lonely.suits(pricing, ep("127.0.0.2"), {}, t0));

  book_type never(30s, ejection(0));
  never.pin(pricing, {ep("127.0.0.2"), ep("127.0.0.3")});
  fail(never, ep("127.0.0.2"), 500);
  CHECK(never.stats(t0).ejected == 0);
}

TEST_CASE("address book: a name is looked up again after its time, or when every address failed, a pin never") {
  book_type book(30s, ejection());
  CHECK(book.needs_lookup(pricing, t0));
  book.store(pricing, {ep("127.0.0.2"), ep("127.0.0.3"), ep("127.0.0.2")}, t0);
  CHECK(order(book) == std::vector<endpoint>{ep("127.0.0.2"), ep("127.0.0.3")}); // duplicates dropped
  CHECK_FALSE(book.needs_lookup(pricing, t0 + 30s - 1ns));
  CHECK(book.needs_lookup(pricing, t0 + 30s));
  book.failed(pricing, ep("127.0.0.2"), t0 + 1s);
  CHECK_FALSE(book.needs_lookup(pricing, t0 + 1s));
  book.failed(pricing, ep("127.0.0.3"), t0 + 1s);
  CHECK(book.needs_lookup(pricing, t0 + 1s));
  book.succeeded(pricing, ep("127.0.0.3"));
  CHECK_FALSE(book.needs_lookup(pricing, t0 + 1s));

  // A new answer keeps what is known of addresses still in it.
  fail(book, ep("127.0.0.2"), 4, t0 + 2s);
  book.store(pricing, {ep("127.0.0.4"), ep("127.0.0.2")}, t0 + 2s);
  CHECK(order(book, {}, t0 + 2s) == std::vector<endpoint>{ep("127.0.0.4"), ep("127.0.0.2")});
  book.failed(pricing, ep("127.0.0.2"), t0 + 2s); // its fifth
  CHECK(book.stats(t0 + 2s).ejected == 1);
  // An ejected address that a lookup no longer lists is forgotten with it.
  book.store(pricing, {ep("127.0.0.4"), ep("127.0.0.5")}, t0 + 3s);
  CHECK(book.stats(t0 + 3s).ejected == 0);

  book_type pinned(0s, ejection());
  pinned.pin(pricing, {ep("127.0.0.2")});
  pinned.failed(pricing, ep("127.0.0.2"), t0);
  CHECK_FALSE(pinned.needs_lookup(pricing, t0 + 1000h));
  pinned.store(pricing, {ep("127.0.0.9")}, t0); // a lookup never replaces a pin
  CHECK(order(pinned) == std::vector<endpoint>{ep("127.0.0.2")});
  // Another port of the same host is another name.
  CHECK(pinned.needs_lookup({"pricing", "8081"}, t0));
}

TEST_CASE("resolve entries: curl's HOST:PORT:ADDR[,ADDR...], read strictly") {
  using coretry::http::parse_resolve_entry;
  const auto e = parse_resolve_entry("Pricing.Internal:8080:127.0.0.2,[::1],10.0.0.7");
  CHECK(e.host == "pricing.internal");
  CHECK(e.port == 8080);
  REQUIRE(e.addresses.size() == 3);
  CHECK(e.addresses[0] == boost::asio::ip::make_address("127.0.0.2"));
  CHECK(e.addresses[1] == boost::asio::ip::make_address("::1"));
  CHECK(e.addresses[2] == boost::asio::ip::make_address("10.0.0.7"));

  const auto refused = [](const std::string& text, const std::string& problem) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(parse_resolve_entry(text), doctest::Contains(problem.c_str()), std::invalid_argument);
  };
  refused("pricing", "no port");
  refused(":80:127.0.0.1", "no host");
  refused("pricing:80", "no address after the port");
  refused("pricing:80:", "no address");
  refused("pricing:0:127.0.0.1", "the port is not a number from 1 to 65535");
  refused("pricing:65536:127.0.0.1", "the port is not a number from 1 to 65535");
  refused("pricing:8o:127.0.0.1", "the port is not a number");
  refused("pricing:80:127.0.0.1,", "an empty address");
  refused("pricing:80:::1", "an IPv6 address must be written in brackets");
  refused("pricing:80:[::1", "without its closing ']'");
  refused("pricing:80:[127.0.0.1]", "is not an IPv6 address");
  refused("pricing:80:localhost", "\"localhost\" is not an IPv4 address");
  refused("pricing:80:127.0.0.1,127.0.0.1", "127.0.0.1 is given twice");
  refused("pri cing:80:127.0.0.1", "the host is not a name");
  refused("pri\r\ncing:80:127.0.0.1", "pri??cing");
  std::string many = "pricing:80:";
  for (int i = 1; i <= 65; ++i) many += (i > 1 ? ",10.0.0." : "10.0.0.") + std::to_string(i);
  refused(many, "more than 64 addresses");
  refused(std::string(5000, 'a'), "longer than 4096 characters");

  CHECK(coretry::http::to_string(ep("127.0.0.2", 81)) == "127.0.0.2:81");
  CHECK(coretry::http::to_string(ep("::1", 81)) == "[::1]:81");
}

TEST_CASE("address book: at most max_names names are kept, the one looked up longest ago forgotten, pins never") {
  using coretry::http::detail::max_names;
  book_type book(1h, ejection());
  book.pin({"pinned", "80"}, {ep("127.0.0.9", 80)});
  book.store({"first", "80"}, {ep("127.0.0.2", 80)}, t0);
  std::vector<std::string> hosts;
  for (std::size_t i = 0; i + 2 < max_names; ++i) hosts.push_back("host" + std::to_string(i));
  for (const auto& host : hosts) book.store({host, "80"}, {ep("127.0.0.3", 80)}, t0 + 1s);
  CHECK_FALSE(book.needs_lookup({"first", "80"}, t0 + 2s)); // 1,024 names: all kept
  book.store({"one-more", "80"}, {ep("127.0.0.4", 80)}, t0 + 2s);
  CHECK(book.needs_lookup({"first", "80"}, t0 + 2s)); // forgotten
  CHECK_FALSE(book.needs_lookup({"host0", "80"}, t0 + 2s));
  CHECK_FALSE(book.needs_lookup({"one-more", "80"}, t0 + 2s));
  CHECK(book.pinned({"pinned", "80"}));
}
