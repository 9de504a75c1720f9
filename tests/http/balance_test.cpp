// Requests spread over a name's addresses, through real sockets on loopback
// (127.0.0.2 ... 127.0.0.5 need no setup on Linux): keep-alive requests
// share equal addresses, a slow address gets little, an ejected one none,
// first_to_connect keeps today's single address, and a name of one address
// is not balanced at all.

#include "blocking_client.hpp"
#include "fleet.hpp"

#include "policies.hpp"

#include <coretry/http/client.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

namespace spreading {

using namespace std::chrono_literals;
using namespace coretry_tests::fleets;
using coretry_tests::hostile_server;
namespace beast_http = boost::beast::http;

const std::vector<std::string> four{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"};

/// `total` GETs of `url`, `in_flight` at a time, each operation one attempt;
/// runs `c`'s io_context until all are done. Returns how many succeeded.
std::size_t send_many(coretry_tests::blocking_client& c, const std::string& url, std::size_t total,
                      std::size_t in_flight) {
  coretry::policy once = coretry::test::loopback_policy(20s, 5s);
  once.max_attempts = 1;
  const coretry::http::request_options options = with_policy(once);
  std::size_t started = 0;
  std::size_t succeeded = 0;
  std::function<void()> next = [&] {
    if (started == total) return;
    ++started;
    c.client.async_send(url, coretry::http::request(beast_http::verb::get, "", 11), options,
                        [&](std::exception_ptr e, coretry::http::result r) {
                          REQUIRE_FALSE(e);
                          if (r.succeeded()) ++succeeded;
                          next();
                        });
  };
  for (std::size_t i = 0; i < in_flight; ++i) next();
  c.io.run();
  c.io.restart();
  return succeeded;
}

/// The fleet's requests per address.
std::vector<std::size_t> shares(const fleet& f, std::size_t n) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(f.requests(i));
  return out;
}

} // namespace spreading

using namespace spreading;

TEST_CASE("balance: four equal addresses share keep-alive requests about evenly, and addresses() shows it") {
  std::vector<hostile_server::script> scripts(4, status_always(200, 1ms));
  fleet f(four, scripts);
  coretry_tests::blocking_client c(pinned(f.resolve(four)));
  REQUIRE(send_many(c, f.url(), 400, 4) == 400);
  const auto counts = shares(f, 4);
  CAPTURE(counts[0]);
  CAPTURE(counts[1]);
  CAPTURE(counts[2]);
  CAPTURE(counts[3]);
  for (const std::size_t n : counts) {
    // A quarter each over time; over a quarter of a second, the peaks each
    // address's latency happens to show tilt it (an estimate forgets them
    // in 10 s, and latency weighs more than requests in flight), the more
    // on a loaded machine or under a sanitizer (5 of 400 seen beside a
    // sanitizer build). Every address is tried (one with no answer yet
    // costs nothing), and none takes half; without the balancer one takes
    // nearly all. tests/bench/balance.sh measures the shares.
    CHECK(n >= 1);
    CHECK(n <= 200); // 50%
  }
  // Keep-alive: connections are reused, not one per request.
  CHECK(c.client.stats().connections_opened <= 32);

  const auto seen = c.client.addresses().spread;
  REQUIRE(seen.size() == 4);
  std::uint64_t requests = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(seen[i].name == "pricing:" + std::to_string(f.port));
    CHECK(coretry::http::to_string(seen[i].address) == four[i] + ":" + std::to_string(f.port));
    CHECK(seen[i].requests == counts[i]);
    CHECK(seen[i].outstanding == 0);
    CHECK(seen[i].cost > 0);
    CHECK_FALSE(seen[i].ejected);
    requests += seen[i].requests;
  }
  CHECK(requests == 400);
}

TEST_CASE("balance: an address much slower than the others gets a small share") {
  std::vector<hostile_server::script> scripts(4, status_always(200, 1ms));
  scripts[2] = status_always(200, 60ms);
  fleet f(four, scripts);
  coretry_tests::blocking_client c(pinned(f.resolve(four)));
  REQUIRE(send_many(c, f.url(), 300, 2) == 300);
  const auto counts = shares(f, 4);
  CAPTURE(counts[0]);
  CAPTURE(counts[1]);
  CAPTURE(counts[2]);
  CAPTURE(counts[3]);
  CHECK(counts[2] <= 9); // 3%: tried, then left while its estimate decays
  CHECK(counts[0] + counts[1] + counts[3] >= 291); // the fast ones take the rest,
  CHECK(std::max({counts[0], counts[1], counts[3]}) <= 250); // not one of them alone
}

TEST_CASE("balance: first_to_connect keeps every request on the first address") {
  std::vector<hostile_server::script> scripts(4, status_always(200, 1ms));
  fleet f(four, scripts);
  coretry::http::client_options o = pinned(f.resolve(four));
  o.balance = coretry::http::balance_mode::first_to_connect;
  coretry_tests::blocking_client c(o);
  REQUIRE(send_many(c, f.url(), 200, 2) == 200);
  CHECK(f.requests(0) == 200);
  CHECK(c.client.addresses().spread.empty());
}

TEST_CASE("balance: an ejected address gets no request, the others share them") {
  std::vector<hostile_server::script> scripts(4, status_always(200, 1ms));
  scripts[1] = status_always(503);
  fleet f(four, scripts);
  coretry::http::client_options o = pinned(f.resolve(four));
  // Ejected at its first 503: an address whose first answer happened to be
  // slow (a loopback server's first connection can take milliseconds) is
  // left for seconds, and might not meet five requests in a row soon.
  o.ejection.consecutive_failures = 1;
  coretry_tests::blocking_client c(o);
  // Until the 503 has ejected it: it is tried while it has no answer.
  for (int i = 0; i < 200 && c.client.addresses().ejected == 0; ++i) send_many(c, f.url(), 1, 1);
  REQUIRE(c.client.addresses().ejected == 1);
  CHECK(f.requests(1) == 1);
  const auto before = shares(f, 4);
  CHECK(send_many(c, f.url(), 300, 3) == 300);
  const auto after = shares(f, 4);
  CHECK(after[1] == before[1]);
  CHECK(after[0] + after[2] + after[3] == before[0] + before[2] + before[3] + 300);
  const auto seen = c.client.addresses().spread;
  REQUIRE(seen.size() == 4);
  CHECK(seen[1].ejected);
  CHECK(seen[1].requests == 1);
}

TEST_CASE("balance: a name of one address is not balanced: one connection, nothing spread") {
  std::vector<hostile_server::script> scripts(1, status_always(200));
  const std::vector<std::string> one{"127.0.0.2"};
  fleet f(one, scripts);
  coretry_tests::blocking_client c(pinned(f.resolve(one)));
  REQUIRE(send_many(c, f.url(), 100, 1) == 100);
  CHECK(f.requests(0) == 100);
  CHECK(c.client.stats().connections_opened == 1);
  CHECK(c.client.addresses().spread.empty());
}

TEST_CASE("balance: with ejection off, an address that refuses connections is left, and keep-alive holds") {
  const std::vector<std::string> two{"127.0.0.2", "127.0.0.3"};
  std::vector<hostile_server::script> scripts{status_always(200, 1ms), {}}; // nothing listens on the second
  fleet f(two, scripts);
  coretry::http::client_options o = pinned(f.resolve(two));
  o.ejection.consecutive_failures = 0;
  coretry_tests::blocking_client c(o);
  REQUIRE(send_many(c, f.url(), 100, 1) == 100);
  CHECK(f.requests(0) == 100);
  // A refused connect is a costly sample: the refusing address is not
  // drawn again within the test, so requests reuse the connections to the
  // other (it was about one new connection per request, up to the pool's
  // limit, while a refusing address cost nothing).
  CHECK(c.client.stats().connections_opened <= 5);
  CHECK(c.client.addresses().ejected == 0);
}
