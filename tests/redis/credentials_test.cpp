// AUTH's credentials from the environment or a file, and an ACL user logging
// in with them against a redis-server of the test's own.

#include "redis_server.hpp"

#include <coretry/redis/credentials.hpp>
#include <coretry/redis/shared_state.hpp>
#include <coretry/redis/url.hpp>

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

using namespace redis_tests;
using coretry::redis::credentials;
using coretry::redis::read_credentials;
using coretry::redis::use_credentials;

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

// A file of the test's own with `content`, removed with it.
struct scratch_file {
  explicit scratch_file(const std::string& content) {
    std::string pattern = (std::filesystem::temp_directory_path() / "coretry-redis-password-XXXXXX").string();
    const int fd = ::mkstemp(pattern.data());
    REQUIRE(fd >= 0);
    ::close(fd);
    path = pattern;
    std::ofstream(path, std::ios::binary) << content;
  }
  ~scratch_file() { std::filesystem::remove(path); }
  std::string path;
};

std::string refusal(const std::string& file = {}) {
  try {
    read_credentials(file);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
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
    environment env("alice", ""); // set empty: not set
    CHECK(refusal().find("CORETRY_REDIS_USERNAME needs a password") != std::string::npos);
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
