// A name at several addresses, through real sockets on loopback (127.0.0.2,
// 127.0.0.3 and ::1 need no setup on Linux): racing new connections, a retry
// or a hedge going to another address, ejection and return, and lookups that
// age.

#include "blocking_client.hpp"
#include "fleet.hpp"
#include "hostile_server.hpp"

#include "policies.hpp"
#include "skip.hpp"

#include <coretry/http/client.hpp>

#include <doctest/doctest.h>

#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace many_addresses {

using namespace std::chrono_literals;
using coretry_tests::hostile_server;
using namespace coretry_tests::fleets;
namespace beast_http = boost::beast::http;

/// A listener on `address`:`port` that never accepts, its backlog filled:
/// the kernel drops further SYNs, so a connection to it neither succeeds
/// nor fails (a dead instance whose packets are dropped).
struct blackhole {
  blackhole(const std::string& address, unsigned short port) {
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_port = htons(port);
    REQUIRE(::inet_pton(AF_INET, address.c_str(), &at.sin_addr) == 1);
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    const int on = 1;
    ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
    REQUIRE(::listen(listener, 0) == 0);
    for (int i = 0; i < 16 && !holding; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      fillers.push_back(fd);
      ::connect(fd, reinterpret_cast<sockaddr*>(&at), sizeof at);
      pollfd p{fd, POLLOUT, 0};
      holding = ::poll(&p, 1, 200) == 0; // this one hangs: the backlog is full
    }
    REQUIRE(holding);
  }
  ~blackhole() {
    for (int fd : fillers) ::close(fd);
    ::close(listener);
  }
  blackhole(const blackhole&) = delete;
  blackhole& operator=(const blackhole&) = delete;

  int listener = -1;
  std::vector<int> fillers;
  bool holding = false;
};

} // namespace many_addresses

using namespace many_addresses;

TEST_CASE("many addresses: a retry after a 503 goes to the other address, never twice to the same") {
  const std::vector<std::string> addresses{"127.0.0.2", "127.0.0.3"};
  fleet f(addresses, {status_always(503), status_always(200)});
  for (int i = 0; i < 10; ++i) {
    CAPTURE(i);
    // A new client each time: its first attempt goes to the first address.
    coretry::http::client_options o = pinned(f.resolve(addresses));
    o.balance = coretry::http::balance_mode::first_to_connect;
    o.ejection.consecutive_failures = 0;
    coretry_tests::blocking_client c(o);
    const std::size_t before = f.requests(0);
    const auto r = c.send(beast_http::verb::get, f.url(), with_policy(coretry::test::loopback_policy(10s, 2s)));
    CHECK(r.succeeded());
    CHECK(r.attempts == 2);
    CHECK(f.requests(0) == before + 1);
    CHECK(address_of(r) == "127.0.0.3:" + std::to_string(f.port));
  }

  // One client, many operations: none sends two attempts to the 503.
  coretry::http::client_options o = pinned(f.resolve(addresses));
  o.balance = coretry::http::balance_mode::first_to_connect;
  o.ejection.consecutive_failures = 0;
  coretry_tests::blocking_client c(o);
  for (int i = 0; i < 20; ++i) {
    CAPTURE(i);
    if (i % 3 == 0) c.client.close_idle(); // new connections now and then: the first address first
    const std::size_t before = f.requests(0);
    CHECK(c.send(beast_http::verb::get, f.url(), with_policy(coretry::test::loopback_policy(10s, 2s))).succeeded());
    CHECK(f.requests(0) <= before + 1);
  }
  CHECK(f.requests(0) >= 7);
}

TEST_CASE("many addresses: a refused address is passed over at once, within the first attempt") {
  const std::vector<std::string> addresses{"127.0.0.2", "127.0.0.3"};
  fleet f(addresses, {nullptr, status_always(200)});
  coretry::http::client_options o = pinned(f.resolve(addresses));
  o.connection_attempt_delay = 5s; // a refusal must not wait for it
  coretry_tests::blocking_client c(o);
  const auto start = std::chrono::steady_clock::now();
  const auto r = c.send(beast_http::verb::get, f.url(), with_policy(coretry::test::loopback_policy(10s, 8s)));
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  CHECK(r.succeeded());
  CHECK(r.attempts == 1);
  CHECK(address_of(r) == "127.0.0.3:" + std::to_string(f.port));
  CHECK(c.client.addresses().connect_races == 1);
  CHECK(c.client.stats().lookups == 0); // a pinned name is never looked up
}

TEST_CASE("many addresses: a blackholed address costs the connection attempt delay, not the attempt's time") {
  const std::vector<std::string> addresses{"127.0.0.2", "127.0.0.3"};
  fleet f(addresses, {nullptr, status_always(200)});
  blackhole hole("127.0.0.2", f.port);
  coretry::http::client_options o = pinned(f.resolve(addresses));
  o.balance = coretry::http::balance_mode::first_to_connect; // the blackhole first
  o.connection_attempt_delay = 150ms;
  coretry_tests::blocking_client c(o);
  const auto start = std::chrono::steady_clock::now();
  const auto r = c.send(beast_http::verb::get, f.url(), with_policy(coretry::test::loopback_policy(20s, 10s)));
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(r.succeeded());
  CHECK(r.attempts == 1);
  CHECK(took >= 150ms);
  CHECK(took < 3s);
  CHECK(address_of(r) == "127.0.0.3:" + std::to_string(f.port));
  CHECK(c.client.stats().open == 1); // the loser was closed, not pooled

  // Without a second address the attempt's own deadline is what ends it.
  coretry::http::client_options alone = pinned("pricing:" + std::to_string(f.port) + ":127.0.0.2");
  coretry_tests::blocking_client lonely(alone);
  coretry::policy one = coretry::test::loopback_policy(10s, 300ms);
  one.max_attempts = 1;
  const auto timed_out = lonely.send(beast_http::verb::get, f.url(), with_policy(one));
  CHECK_FALSE(timed_out.succeeded());
  CHECK(address_of(timed_out).empty());
  CHECK(lonely.client.stats().open == 0);
}

TEST_CASE("many addresses: five 503s in a row eject an address, tried again after its time") {
  const std::vector<std::string> addresses{"127.0.0.2", "127.0.0.3"};
  fleet f(addresses, {status_always(503), status_always(200)});
  coretry::http::client_options o = pinned(f.resolve(addresses));
  o.balance = coretry::http::balance_mode::first_to_connect; // the 503 first
  o.ejection.base_ejection_time = 400ms;
  coretry_tests::blocking_client c(o);
  coretry::policy once = coretry::test::loopback_policy(10s, 2s);
  once.max_attempts = 1;
  // The 503 connection is pooled and reused, so each operation meets it
  // until it is ejected.
  for (int i = 0; i < 5; ++i) CHECK_FALSE(c.send(beast_http::verb::get, f.url(), with_policy(once)).succeeded());
  CHECK(f.requests(0) == 5);
  CHECK(c.client.addresses().ejections == 1);
  CHECK(c.client.addresses().ejected == 1);
  for (int i = 0; i < 10; ++i) {
    const auto r = c.send(beast_http::verb::get, f.url(), with_policy(once));
    CHECK(r.succeeded());
    CHECK(address_of(r) == "127.0.0.3:" + std::to_string(f.port));
  }
  CHECK(f.requests(0) == 5);

  std::this_thread::sleep_for(450ms);
  CHECK(c.client.addresses().ejected == 0);
  // Back: the next operation gets a new connection to it, although a pooled
  // one to 127.0.0.3 is idle. Still failing, it is ejected again after five
  // more, for twice as long.
  CHECK_FALSE(c.send(beast_http::verb::get, f.url(), with_policy(once)).succeeded());
  CHECK(f.requests(0) == 6);
  for (int i = 0; i < 4; ++i) CHECK_FALSE(c.send(beast_http::verb::get, f.url(), with_policy(once)).succeeded());
  CHECK(f.requests(0) == 10);
  CHECK(c.client.addresses().ejections == 2);
  CHECK(c.send(beast_http::verb::get, f.url(), with_policy(once)).succeeded());
  CHECK(f.requests(0) == 10);
}

TEST_CASE("many addresses: a 501 is the request's failure, not the address's: nothing is ejected") {
  const std::vector<std::string> addresses{"127.0.0.2", "127.0.0.3"};
  fleet f(addresses, {status_always(501), status_always(200)});
  coretry::http::client_options o = pinned(f.resolve(addresses));
  o.balance = coretry::http::balance_mode::first_to_connect; // the 501 first
  coretry_tests::blocking_client c(o);
  coretry::policy once = coretry::test::loopback_policy(10s, 2s);
  once.max_attempts = 1;
  for (int i = 0; i < 8; ++i) CHECK_FALSE(c.send(beast_http::verb::get, f.url(), with_policy(once)).succeeded());
  CHECK(f.requests(0) == 8);
  CHECK(c.client.addresses().ejections == 0);
}

TEST_CASE("many addresses: a hedge goes to another address than the attempt it backs up") {
  const std::vector<std::string> addresses{"127.0.0.2", "127.0.0.3"};
  fleet f(addresses, {status_always(200, 1500ms), status_always(200)});
  coretry_tests::blocking_client c(pinned(f.resolve(addresses)));
  coretry::policy p = coretry::test::loopback_policy(10s, 5s);
  p.hedging.max_hedges = 1;
  p.hedging.delay = 100ms;
  const auto start = std::chrono::steady_clock::now();
  const auto r = c.send(beast_http::verb::get, f.url(), with_policy(p));
  CHECK(std::chrono::steady_clock::now() - start < 1s);
  CHECK(r.succeeded());
  CHECK(address_of(r) == "127.0.0.3:" + std::to_string(f.port));
  CHECK(f.requests(1) == 1);
}

TEST_CASE("many addresses: IPv6 and IPv4 together, the families interleaved") {
  std::unique_ptr<hostile_server> v6;
  try {
    v6 = std::make_unique<hostile_server>(std::vector<hostile_server::script>{status_always(200)}, "::1", 0);
  } catch (const boost::system::system_error&) {
    coretry::test::skip_test("this machine cannot listen on ::1");
    return;
  }
  const std::string port = std::to_string(v6->port());
  // 127.0.0.2 has no listener on this port: refused, and [::1] is next.
  coretry_tests::blocking_client c(pinned("dual:" + port + ":127.0.0.2,[::1]"));
  const auto r = c.send(beast_http::verb::get, "http://dual:" + port + "/");
  CHECK(r.succeeded());
  CHECK(address_of(r) == "[::1]:" + port);
  REQUIRE(v6->requests().size() == 1);
  CHECK(v6->requests()[0].find("\r\nHost: dual:" + port + "\r\n") != std::string::npos);
}

TEST_CASE("many addresses: a name's lookup is kept for lookup_ttl") {
  hostile_server server({status_always(200)});
  const std::string url = "http://localhost:" + std::to_string(server.port()) + "/";
  coretry_tests::blocking_client kept;
  for (int i = 0; i < 3; ++i) {
    kept.client.close_idle();
    CHECK(kept.send(beast_http::verb::get, url).succeeded());
  }
  CHECK(kept.client.stats().lookups == 1);

  coretry::http::client_options every;
  every.lookup_ttl = coretry::duration::zero();
  coretry_tests::blocking_client each(every);
  for (int i = 0; i < 3; ++i) {
    each.client.close_idle();
    CHECK(each.send(beast_http::verb::get, url).succeeded());
  }
  CHECK(each.client.stats().lookups == 3);
}

TEST_CASE("many addresses: options that make no sense are refused, naming the problem") {
  boost::asio::io_context io;
  const auto refused = [&](coretry::http::client_options o, const std::string& problem) {
    CAPTURE(problem);
    CHECK_THROWS_WITH_AS(coretry::http::client(io.get_executor(), o), doctest::Contains(problem.c_str()),
                         std::invalid_argument);
  };
  refused(pinned("pricing:80:not-an-address"), "resolve entry \"pricing:80:not-an-address\"");
  coretry::http::client_options o;
  o.connection_attempt_delay = 9ms;
  refused(o, "connection_attempt_delay must be at least 10 ms");
  o = {};
  o.lookup_ttl = -1ms;
  refused(o, "lookup_ttl must not be negative");
  o = {};
  o.ejection.max_ejection_percent = 101;
  refused(o, "max_ejection_percent must be at most 100");
  o = {};
  o.ejection.base_ejection_time = 0s;
  refused(o, "base_ejection_time must be positive");
  o = {};
  o.ejection.max_ejection_time = 10s;
  refused(o, "max_ejection_time at least as long");
  o = {};
  o.resolve.assign(1025, "pricing:80:127.0.0.1");
  refused(o, "more than 1024 resolve entries");
}
