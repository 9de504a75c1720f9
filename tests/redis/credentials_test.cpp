// AUTH's credentials from the environment or a file, and an ACL user logging
// in with them against a redis-server of the test's own.

#include "redis_server.hpp"
#include "scratch_file.hpp"

#include <coretry/redis/credentials.hpp>
#include <coretry/redis/shared_state.hpp>
#include <coretry/redis/url.hpp>

#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

using namespace redis_tests;
using coretry::redis::credentials;
using coretry::redis::read_credentials;
using coretry::redis::use_credentials;
using coretry::test::scratch_file;

namespace {

// Sets (or with nullptr, unsets) the two variables for the scope.
struct environment {
  environment(const char* user, const char* password) {
    set("CORETRY_REDIS_USERNAME", user);
    set("CORETRY_REDIS_PASSWORD", password);
  }
  ~environment() {
    ::unsetenv("CORETRY_REDIS_USERNAME");
    ::unsetenv("CORETRY_REDIS_PASSWORD");
  }
  static void set(const char* name, const char* value) {
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
};

std::string refusal(const std::string& file = {}) {
  try {
    read_credentials(file);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

// What use_credentials() makes of `url` with `given`: "USER PASSWORD" (the
// user "(default)" when none is named), or "refused: " and why.
std::string login(const std::string& url, const credentials& given) {
  coretry::redis::endpoint at = coretry::redis::parse_url(url);
  try {
    use_credentials(at, given);
  } catch (const std::invalid_argument& e) {
    return std::string("refused: ") + e.what();
  }
  return at.user.value_or("(default)") + " " + at.password;
}

} // namespace

TEST_CASE("redis: credentials come from CORETRY_REDIS_USERNAME and CORETRY_REDIS_PASSWORD, or a file") {
  const std::string secret = "Sw0rdfish-Secret";
  {
    environment env(nullptr, nullptr);
    const credentials none = read_credentials();
    CHECK_FALSE(none.user);
    CHECK(none.password.empty());
  }
  {
    environment env("alice", secret.c_str());
    const credentials c = read_credentials();
    CHECK(c.user.value() == "alice");
    CHECK(c.password == secret);
  }
  {
    environment env(nullptr, secret.c_str());
    const credentials c = read_credentials();
    CHECK_FALSE(c.user);
    CHECK(c.password == secret);
  }
  {
    environment env("alice", ""); // set empty: not set; whether that will do is use_credentials()'s to say
    const credentials c = read_credentials();
    CHECK(c.user.value() == "alice");
    CHECK(c.password.empty());
  }
  {
    environment env("alice", "from-the-environment");
    scratch_file file(secret + "\n");
    const credentials c = read_credentials(file.path);
    CHECK(c.user.value() == "alice");
    CHECK(c.password == secret); // the file's, without its newline
    scratch_file crlf(secret + "\r\n");
    CHECK(read_credentials(crlf.path).password == secret);
  }
  {
    environment env(nullptr, nullptr);
    scratch_file two_lines(secret + "\nmore\n");
    scratch_file empty("");
    scratch_file large(std::string(5000, 'x') + secret);
    scratch_file long_password(std::string(600, 'x') + secret);
    const std::pair<std::string, std::string> bad[] = {
        {"/nonexistent/password", "cannot be read"},
        {two_lines.path, "control character"},
        {empty.path, "password is empty"},
        {large.path, "larger than 4 KiB"},
        {long_password.path, "longer than 512 bytes"},
    };
    for (const auto& [path, why] : bad) {
      CAPTURE(path);
      const std::string message = refusal(path);
      CHECK(message.find(why) != std::string::npos);
      CHECK(message.find(path) != std::string::npos);
      CHECK(message.find("Secret") == std::string::npos);
    }
  }
  {
    environment env("bob", (std::string(600, 'y') + secret).c_str());
    const std::string message = refusal();
    CHECK(message.find("CORETRY_REDIS_PASSWORD") != std::string::npos);
    CHECK(message.find("Secret") == std::string::npos);
  }
}

TEST_CASE("redis: the URL's userinfo wins over the credentials given outside it") {
  coretry::redis::endpoint with = coretry::redis::parse_url("redis://carol:in-the-url@h");
  use_credentials(with, credentials{"alice", "outside"});
  CHECK(with.user.value() == "carol");
  CHECK(with.password == "in-the-url");
  coretry::redis::endpoint without = coretry::redis::parse_url("rediss://h");
  use_credentials(without, credentials{"alice", "outside"});
  CHECK(without.user.value() == "alice");
  CHECK(without.password == "outside");
  CHECK(without.tls);
  use_credentials(without, credentials{});
  CHECK(without.password == "outside");
  coretry::redis::endpoint user_only = coretry::redis::parse_url("redis://dave@h");
  use_credentials(user_only, credentials{"alice", "outside"});
  CHECK(user_only.user.value() == "dave");
  CHECK(user_only.password == "outside");
}

TEST_CASE("redis: one rule for AUTH: the URL's password wins, and only a user with no password anywhere is refused") {
  const credentials none{}, both{"bob", "from-outside"}, password_only{std::nullopt, "from-outside"},
      user_only{"bob", ""};
  // User and password in the URL, percent-decoded: used whole, whatever is given outside it.
  CHECK(login("redis://alice:in%40url@h", none) == "alice in@url");
  CHECK(login("redis://alice:in%40url@h", both) == "alice in@url");
  CHECK(login("redis://alice:in%40url@h", password_only) == "alice in@url");
  CHECK(login("redis://alice:in%40url@h", user_only) == "alice in@url");
  // A password alone in the URL: the default user.
  CHECK(login("redis://:in-url@h", none) == "(default) in-url");
  CHECK(login("redis://:in-url@h", both) == "(default) in-url");
  // A user in the URL, the password from outside.
  CHECK(login("redis://alice@h", password_only) == "alice from-outside");
  CHECK(login("redis://alice@h", both) == "alice from-outside");
  // Nothing in the URL: what is given outside, a password alone, or no AUTH.
  CHECK(login("redis://h", both) == "bob from-outside");
  CHECK(login("redis://h", password_only) == "(default) from-outside");
  CHECK(login("redis://h", none) == "(default) ");
  // A user with no password from anywhere.
  CHECK(login("redis://alice@h", none).starts_with("refused: the Redis user name in the URL needs a password"));
  CHECK(login("redis://alice@h", user_only).starts_with("refused: the Redis user name in the URL needs a password"));
  CHECK(login("redis://h", user_only).starts_with("refused: CORETRY_REDIS_USERNAME needs a password"));
  // The same with the user from the environment.
  {
    environment env("bob", nullptr);
    CHECK(login("redis://alice:in-url@h", read_credentials()) == "alice in-url");
    CHECK(login("redis://:in-url@h", read_credentials()) == "(default) in-url");
    CHECK(login("rediss://h", read_credentials()).starts_with("refused: CORETRY_REDIS_USERNAME needs a password"));
  }
  // An endpoint made by hand: a password AUTH could not carry, never shown.
  coretry::redis::endpoint made;
  made.host = "h";
  made.password = "two\nlines-Secret";
  try {
    use_credentials(made, none);
    FAIL("a password with a line break was taken");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("control character") != std::string::npos);
    CHECK(std::string(e.what()).find("Secret") == std::string::npos);
  }
}

TEST_CASE("redis: shared_state takes its server's credentials by the same rule") {
  boost::asio::io_context io;
  coretry::redis::shared_state::options o;
  const auto refusal_of = [&](const std::string& url) -> std::string {
    o.server = coretry::redis::parse_url(url);
    try {
      coretry::redis::shared_state state(io.get_executor(), o);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(accepted)";
  };
  CHECK(refusal_of("redis://alice:in-url@127.0.0.1:1") == "(accepted)");
  CHECK(refusal_of("redis://:in-url@127.0.0.1:1") == "(accepted)");
  CHECK(refusal_of("redis://127.0.0.1:1") == "(accepted)");
  CHECK(refusal_of("redis://alice@127.0.0.1:1") ==
        "coretry::redis::shared_state: the Redis user name in the URL needs a password (in the URL, "
        "CORETRY_REDIS_PASSWORD or a password file)");
  o.server.password = std::string(600, 'x') + "-Secret";
  try {
    coretry::redis::shared_state state(io.get_executor(), o);
    FAIL("a password over 512 bytes was taken");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("longer than 512 bytes") != std::string::npos);
    CHECK(std::string(e.what()).find("Secret") == std::string::npos);
  }
}

TEST_CASE("redis: an ACL user logs in with the password in the URL, percent-encoded, or from outside it") {
  const std::string password = "acl/P@ss:w0rd-of-alice";
  REDIS_SERVER_OR_SKIP(server, redis_server::options{.acl_user = "alice", .acl_password = password});
  const std::string at = "@127.0.0.1:" + std::to_string(server->port());
  const std::string in_url = "redis://alice:acl%2FP%40ss%3Aw0rd-of-alice" + at;
  struct form {
    const char* name;
    std::string url;
    const char* user;     // CORETRY_REDIS_USERNAME
    const char* password; // CORETRY_REDIS_PASSWORD
  };
  for (const form& f : {form{"user and password in the URL", in_url, nullptr, nullptr},
                        form{"the URL's password wins over the environment's", in_url, nullptr, "not-the-password"},
                        form{"CORETRY_REDIS_USERNAME alone beside them", in_url, "bob", nullptr},
                        form{"the user in the URL, the password outside", "redis://alice" + at, nullptr, password.c_str()},
                        form{"both outside", "redis://127.0.0.1:" + std::to_string(server->port()), "alice",
                             password.c_str()}}) {
    CAPTURE(f.name);
    credentials given;
    {
      environment env(f.user, f.password);
      given = read_credentials();
    }
    auto o = fleet_options(server->port(), "member");
    o.server = coretry::redis::parse_url(f.url);
    use_credentials(o.server, given);
    fleet_process p{o};
    // The default user is off: sharing proves alice logged in.
    CHECK(eventually([&] { return p.state.up(); }));
    CHECK(p.told.size() == 0);
  }
}

TEST_CASE("redis: an ACL user from the environment logs in, and a wrong password is told by its code word only") {
  const bool tls = tls_subcase();
  const std::string password = "acl-Passw0rd-of-alice";
  REDIS_SERVER_OR_SKIP(server, redis_server::options{.tls = tls, .acl_user = "alice", .acl_password = password});
  credentials given;
  {
    environment env("alice", password.c_str());
    given = read_credentials();
  }
  auto o = fleet_options(*server, "acl-member", tls);
  use_credentials(o.server, given);
  fleet_process p{o};
  REQUIRE(eventually([&] { return p.state.up() && p.budget->leased() == 5; }));
  CHECK(p.told.size() == 0);
  const auto clients = server->command({"CLIENT", "LIST"});
  REQUIRE(clients);
  CHECK(clients->text.find("user=alice") != std::string::npos);

  auto wrong = fleet_options(*server, "acl-intruder", tls);
  use_credentials(wrong.server, credentials{"alice", "not-" + password});
  fleet_process q{wrong};
  REQUIRE(eventually([&] { return q.told.size() >= 1; }, std::chrono::seconds(5)));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto messages = q.told.all();
  REQUIRE(messages.size() == 1);
  CHECK(messages[0] == "Redis refused AUTH: WRONGPASS");
  CHECK_FALSE(q.state.up());
}
