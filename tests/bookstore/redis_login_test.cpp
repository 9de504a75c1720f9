// The program's Redis credentials, each way a user may give them: in the
// URL, from the environment or a file, or both (the URL's password wins);
// against a redis-server of the test's own with an ACL user. The password
// must show in no output, metric or message.

#include "bookstore/bookstore.hpp"
#include "bookstore_support.hpp"

#include "eventually.hpp"
#include "program.hpp"
#include "scratch_file.hpp"
#include "server_thread.hpp"
#if CORETRY_BOOKSTORE_TESTS_REDIS
#include "redis/redis_server.hpp"
#endif

#include <doctest/doctest.h>

#include <csignal>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using namespace bookstore_tests;
using coretry::test::eventually;
using coretry::test::server_thread;

TEST_SUITE("bookstore") {

TEST_CASE("validate takes a user and password from the URL, and refuses a user with no password from anywhere") {
  coretry::bookstore::options o;
  o.pricing_url = "http://127.0.0.1:1/";
  o.shared_state = "redis://fleetuser:in-the-url@127.0.0.1:6379";
  CHECK_NOTHROW(coretry::bookstore::validate(o));
  o.shared_state = "redis://:in-the-url@127.0.0.1:6379";
  CHECK_NOTHROW(coretry::bookstore::validate(o));
  o.shared_state = "redis://fleetuser@127.0.0.1:6379";
  o.shared_state_password = "from-outside";
  CHECK_NOTHROW(coretry::bookstore::validate(o));
  o.shared_state_password.clear();
  try {
    coretry::bookstore::validate(o);
    FAIL("a user with no password was taken");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) == "--shared-state: the Redis user name in the URL needs a password (in the URL, "
                                   "CORETRY_REDIS_PASSWORD or a password file)");
  }
}

TEST_CASE("the program refuses a Redis user with no password from anywhere, naming where one may come from") {
  const std::vector<std::string> args{"--listen", "127.0.0.1:0", "--pricing", "http://127.0.0.1:1/", "--shared-state"};
  auto in_url = args;
  in_url.push_back("redis://fleetuser@127.0.0.1:1");
  const auto refused = coretry::test::run(bookstore_program, in_url, 10s);
  CHECK(refused.status == 2);
  CHECK(refused.err.find("--shared-state: the Redis user name in the URL needs a password") != std::string::npos);
  const auto help = coretry::test::run(bookstore_program, {"--help"}, 10s);
  CHECK(help.status == 0);
  CHECK(help.out.find("the URL's password wins") != std::string::npos);
}

#if CORETRY_BOOKSTORE_TESTS_REDIS

namespace {

void set_or_unset(const char* name, const std::string& value) {
  if (value.empty())
    ::unsetenv(name);
  else
    ::setenv(name, value.c_str(), 1);
}

// The users of the server's connections other than `CLIENT LIST`'s own.
std::vector<std::string> users_connected(const redis_tests::redis_server& redis) {
  std::vector<std::string> users;
  const auto clients = redis.command({"CLIENT", "LIST"});
  REQUIRE(clients);
  std::size_t start = 0;
  while (start < clients->text.size()) {
    auto end = clients->text.find('\n', start);
    if (end == std::string::npos) end = clients->text.size();
    const std::string line = clients->text.substr(start, end - start);
    start = end + 1;
    const auto user = line.find(" user=");
    if (user == std::string::npos || line.find(" cmd=client|list") != std::string::npos) continue;
    users.push_back(line.substr(user + 6, line.find(' ', user + 6) - user - 6));
  }
  return users;
}

} // namespace

TEST_CASE("the program logs in to Redis as an ACL user from the URL, the environment or a file, and the URL's password wins") {
  std::random_device entropy;
  // Characters a URL must escape, and digits no other process has by chance.
  const std::string password = "p@ss:w/rd-" + std::to_string(entropy());
  const std::string escaped = "p%40ss%3Aw%2Frd-" + password.substr(10);
  const std::string default_password = "default-" + std::to_string(entropy());
  REDIS_SERVER_OR_SKIP(redis, redis_tests::redis_server::options{.acl_user = "fleetuser", .acl_password = password});
  // The default user on again, with a password of its own.
  const auto reset = redis->command({"ACL", "SETUSER", "default", "on", "resetpass", ">" + default_password, "~*",
                                     "&*", "+@all"});
  REQUIRE(reset);
  REQUIRE(reset->type == '+');
  const std::string wrong = "wr0ng-" + std::to_string(entropy());
  const coretry::test::scratch_file right_file(password + "\n"), wrong_file(wrong + "\n");
  server_thread pricing;
  const std::string at = "@127.0.0.1:" + std::to_string(redis->port());
  struct form {
    const char* name;
    std::string url;
    std::string user, password; // CORETRY_REDIS_USERNAME, CORETRY_REDIS_PASSWORD (empty: unset)
    std::string file;           // --shared-state-password-file (empty: none)
    const char* logged_in_as;   // nullptr: refused
  };
  const std::vector<form> forms{
           form{"user and password in the URL", "redis://fleetuser:" + escaped + at, "", "", "", "fleetuser"},
           form{"the user in the URL, the password from CORETRY_REDIS_PASSWORD", "redis://fleetuser" + at, "",
                password, "", "fleetuser"},
           form{"the user in the URL, the password from a file", "redis://fleetuser" + at, "", "", right_file.path,
                "fleetuser"},
           form{"user and password from the environment", "redis://127.0.0.1:" + std::to_string(redis->port()),
                "fleetuser", password, "", "fleetuser"},
           form{"a password alone in the URL", "redis://:" + default_password + at, "", "", "", "default"},
           form{"the URL's password wins over CORETRY_REDIS_PASSWORD", "redis://fleetuser:" + escaped + at, "",
                wrong, "", "fleetuser"},
           form{"the URL's password wins over a file", "redis://fleetuser:" + escaped + at, "", "", wrong_file.path,
                "fleetuser"},
           form{"CORETRY_REDIS_USERNAME alone beside a URL with both", "redis://fleetuser:" + escaped + at, "someone",
                "", "", "fleetuser"},
           form{"a wrong password in the URL, the right one outside: the URL's is used",
                "redis://fleetuser:" + wrong + at, "", password, right_file.path, nullptr},
  };
  const auto run = [&](const form& f) {
    std::vector<std::string> args{"--listen", "127.0.0.1:0", "--pricing", pricing.url("/status/200"), "--threads",
                                  "1", "--shared-state", f.url, "--reconcile-period", "100"};
    if (!f.file.empty()) args.insert(args.end(), {"--shared-state-password-file", f.file});
    set_or_unset("CORETRY_REDIS_USERNAME", f.user);
    set_or_unset("CORETRY_REDIS_PASSWORD", f.password);
    coretry::test::child_process store{bookstore_program, args};
    ::unsetenv("CORETRY_REDIS_USERNAME");
    ::unsetenv("CORETRY_REDIS_PASSWORD");
    // Not listening_program: a form the program refuses fails this form only.
    const auto listening = store.read_line(10s);
    CHECK_MESSAGE(listening, "the program did not start: ", store.finish(10s).err);
    if (!listening) return;
    const auto port = port_of(*listening);
    std::string metrics;
    if (f.logged_in_as) {
      CHECK(eventually([&] { return metric(metrics = get(port, "/metrics").body, "coretry_shared_state_up") == 1; }));
      CHECK(eventually([&] { return users_connected(*redis) == std::vector<std::string>{f.logged_in_as}; }));
    } else {
      CHECK(eventually(
          [&] { return metric(metrics = get(port, "/metrics").body, "coretry_shared_state_fallbacks_total") == 1; }));
      CHECK(metric(metrics, "coretry_shared_state_up") == 0);
    }
    CHECK(get(port, "/books/1").status == 200);
    store.send(SIGTERM);
    const auto result = store.finish(20s);
    CHECK(result.status == 0);
    CAPTURE(result.err);
    if (!f.logged_in_as) CHECK(result.err.find("Redis refused AUTH: WRONGPASS") != std::string::npos);
    for (const std::string& secret : {password, escaped, default_password, wrong}) {
      CHECK(metrics.find(secret) == std::string::npos);
      CHECK(result.out.find(secret) == std::string::npos);
      CHECK(result.err.find(secret) == std::string::npos);
    }
  };
  for (const form& f : forms) {
    CAPTURE(std::string{f.name});
    run(f);
    // The next form's connection alone.
    CHECK(eventually([&] { return users_connected(*redis).empty(); }));
  }
}

#endif

} // TEST_SUITE
