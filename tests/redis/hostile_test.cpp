// shared_state against a fake Redis that answers the first command with
// something no Redis would send: a problem, a fall back, the connection
// closed, and memory bounded whatever the reply announces.

#include "fake_redis.hpp"
#include "redis_server.hpp"

#include <coretry/redis/shared_state.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace redis_tests;

namespace {

void check_refused(const std::function<std::string(int, const std::string&)>& answer, const std::string& expected_problem) {
  const long peak_before = peak_rss_kib();
  fake_redis fake(answer);
  fleet_process p{fleet_options(fake.port(), "victim")};
  REQUIRE(eventually([&] { return fake.closed() >= 2 && p.told.size() >= 1; }, std::chrono::seconds(10)));
  const auto messages = p.told.all();
  MESSAGE("problem: " << messages.front());
  CHECK(messages.front().find(expected_problem) != std::string::npos);
  CHECK_FALSE(p.state.up());
  CHECK_FALSE(p.budget->shared());
  CHECK(p.state.fallbacks() == 1);
  CHECK(p.state.exchanges() == 0);
  CHECK(fake.closed() >= 2); // every connection it was sent on was closed, and it came back
  CHECK(fake.accepted() - fake.closed() <= 1);
  const long grown = peak_rss_kib() - peak_before;
  MESSAGE("peak RSS grew by " << grown << " KiB");
  CHECK(grown < 32 * 1024);
}

} // namespace

static std::string first(int n, std::string answer) { return n == 0 ? answer : std::string(); }

const std::string loaded = "$40\r\n" + std::string(40, 'a') + "\r\n"; // SCRIPT LOAD's answer

TEST_CASE("redis: hostile reply - an array of 100000000 elements") {
  check_refused([](int n, const std::string&) { return first(n, "*100000000\r\n"); }, "does not accept");
}

TEST_CASE("redis: hostile reply - an array of 1000000 elements") {
  check_refused([](int n, const std::string&) { return first(n, "*1000000\r\n"); }, "does not accept");
}

TEST_CASE("redis: hostile reply - a 10 MB bulk string") {
  check_refused([](int n, const std::string&) { return first(n, "$10000000\r\n" + std::string(1024 * 1024, 'x')); },
                "longer than 64 KiB");
}

TEST_CASE("redis: hostile reply - two replies to one command") {
  check_refused([](int n, const std::string&) { return first(n, loaded + "+OK\r\n"); }, "more than one reply");
}

TEST_CASE("redis: hostile reply - garbage") {
  check_refused([](int n, const std::string&) { return first(n, "HTTP/1.1 400 Bad Request\r\n\r\n"); }, "does not accept");
}

TEST_CASE("redis: hostile reply - an error to SCRIPT LOAD") {
  check_refused([](int n, const std::string&) { return first(n, "-ERR unknown command 'SCRIPT'\r\n"); },
                "did not load the exchange script");
}

TEST_CASE("redis: hostile reply - the exchange answered with something else than five numbers") {
  SUBCASE("a negative number") {
    check_refused([](int n, const std::string&) { return n == 0 ? loaded : n == 1 ? "*5\r\n:1\r\n:1\r\n:0\r\n:0\r\n:-1\r\n" : ""; },
                  "something else than 5 numbers");
  }
  SUBCASE("three numbers") {
    check_refused([](int n, const std::string&) { return n == 0 ? loaded : n == 1 ? "*3\r\n:1\r\n:1\r\n:0\r\n" : ""; },
                  "something else than 5 numbers");
  }
  SUBCASE("a string among them") {
    check_refused([](int n, const std::string&) { return n == 0 ? loaded : n == 1 ? "*5\r\n:1\r\n$1\r\n1\r\n:0\r\n:0\r\n:0\r\n" : ""; },
                  "something else than 5 numbers");
  }
  SUBCASE("an error") {
    check_refused([](int n, const std::string&) { return n == 0 ? loaded : n == 1 ? "-ERR boom\r\n" : ""; },
                  "refused the exchange script: ERR boom");
  }
}

TEST_CASE("redis: hostile reply - nested arrays, each within the element bound, too many together") {
  // Five arrays of 64 under one of 5: 325 elements, over the 256 allowed
  // for one reply (nesting would otherwise multiply the bound).
  std::string nested = "*5\r\n";
  for (int i = 0; i < 5; ++i) {
    nested += "*64\r\n";
    for (int j = 0; j < 64; ++j) nested += ":1\r\n";
  }
  check_refused([nested](int n, const std::string&) { return first(n, nested); }, "does not accept");
}

TEST_CASE("redis: a refused AUTH is told by its code word only, printable, whatever the server says") {
  fake_redis fake([](int n, const std::string&) {
    return first(n, "-WRONGPASS the password was hunter2\x1b[31m and more\r\n");
  });
  auto o = fleet_options(fake.port(), "careful");
  o.server.password = "hunter2";
  fleet_process p{o};
  REQUIRE(eventually([&] { return p.told.size() >= 1; }, std::chrono::seconds(10)));
  const std::string message = p.told.all().front();
  CAPTURE(message);
  CHECK(message.find("WRONGPASS") != std::string::npos);
  CHECK(message.find("hunter2") == std::string::npos);
  CHECK(message.find('\x1b') == std::string::npos);
}
