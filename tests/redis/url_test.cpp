// redis://[[USER][:PASSWORD]@]HOST[:PORT][/DB]: what is read, what is refused,
// and that no message ever shows the password.

#include <coretry/redis/url.hpp>

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

using coretry::redis::endpoint;
using coretry::redis::parse_url;
using coretry::redis::url_problem;

TEST_CASE("redis: url reads host, port and database") {
  const endpoint e = parse_url("redis://cache.example.com:6380/3");
  CHECK(e.host == "cache.example.com");
  CHECK(e.port == 6380);
  CHECK(e.db == 3);
  CHECK_FALSE(e.user.has_value());
  CHECK(e.password.empty());

  const endpoint d = parse_url("redis://127.0.0.1");
  CHECK(d.host == "127.0.0.1");
  CHECK(d.port == 6379);
  CHECK(d.db == 0);

  CHECK(parse_url("redis://h/").db == 0);
  CHECK(parse_url("redis://h/1000000").db == 1000000);
  CHECK(parse_url("redis://h:1").port == 1);
  CHECK(parse_url("redis://h:65535").port == 65535);
  CHECK_FALSE(url_problem("redis://localhost:6379/0").has_value());
}

TEST_CASE("redis: rediss:// is the same URL over TLS") {
  const endpoint e = parse_url("rediss://alice:s3cret@cache.example.com:6380/3");
  CHECK(e.tls);
  CHECK(e.host == "cache.example.com");
  CHECK(e.port == 6380);
  CHECK(e.db == 3);
  CHECK(e.user.value() == "alice");
  CHECK(e.password == "s3cret");
  CHECK(parse_url("rediss://[::1]").host == "::1");
  CHECK(parse_url("rediss://h").port == 6379);
  CHECK_FALSE(parse_url("redis://h").tls);
}

TEST_CASE("redis: url reads an IPv6 address without its brackets") {
  const endpoint e = parse_url("redis://[::1]:7000/2");
  CHECK(e.host == "::1");
  CHECK(e.port == 7000);
  CHECK(e.db == 2);
  CHECK(parse_url("redis://[2001:db8::5]").host == "2001:db8::5");
  CHECK(parse_url("redis://[2001:db8::5]").port == 6379);
  CHECK(url_problem("redis://[::1"));
  CHECK(url_problem("redis://[::1]x"));
  CHECK(url_problem("redis://[::1]:"));
  CHECK(url_problem("redis://[not-ipv6]:1"));
  CHECK(url_problem("redis://[fe80::1%25eth0]:1"));
}

TEST_CASE("redis: url reads user and password, percent-decoded") {
  const endpoint p = parse_url("redis://:s3cret@h:1");
  CHECK_FALSE(p.user.has_value());
  CHECK(p.password == "s3cret");

  const endpoint u = parse_url("redis://alice:pa%3Ass%40w%2Fd@h");
  REQUIRE(u.user.has_value());
  CHECK(*u.user == "alice");
  CHECK(u.password == "pa:ss@w/d");

  const endpoint raw = parse_url("redis://bob:a:b@c@h:2");
  CHECK(*raw.user == "bob");
  CHECK(raw.password == "a:b@c");
  CHECK(raw.host == "h");
  CHECK(parse_url("redis://%61%6c:x@h").user.value() == "al");

  const endpoint alone = parse_url("rediss://alice@h:7"); // the password from elsewhere
  CHECK(alone.user.value() == "alice");
  CHECK(alone.password.empty());
  CHECK(alone.port == 7);
}

TEST_CASE("redis: url refuses what it cannot use and says why") {
  const auto problem = [](const char* url) { return url_problem(url).value_or(""); };
  CHECK(problem("http://h:6379").find("scheme") != std::string::npos);
  CHECK(problem("redis+tls://h:6379").find("scheme") != std::string::npos);
  CHECK(problem("rediss:/h:6379").find("scheme") != std::string::npos);
  CHECK(problem("rediss://").find("no host") != std::string::npos);
  CHECK(problem("h:6379").find("scheme") != std::string::npos);
  CHECK(problem("redis://").find("no host") != std::string::npos);
  CHECK(problem("redis://:6379").find("no host") != std::string::npos);
  CHECK(problem("redis://:pw@/1").find("no host") != std::string::npos);
  CHECK(problem("redis://h:0").find("port") != std::string::npos);
  CHECK(problem("redis://h:65536").find("port") != std::string::npos);
  CHECK(problem("redis://h:abc").find("port") != std::string::npos);
  CHECK(problem("redis://h:").find("port") != std::string::npos);
  CHECK(problem("redis://h:-1").find("port") != std::string::npos);
  CHECK(problem("redis://h/abc").find("database") != std::string::npos);
  CHECK(problem("redis://h/1000001").find("database") != std::string::npos);
  CHECK(problem("redis://h/-1").find("database") != std::string::npos);
  CHECK(problem("redis://h/1?timeout=1").find("query") != std::string::npos);
  CHECK(problem("redis://h#x").find("fragment") != std::string::npos);
  CHECK(problem("redis://h\x01:1").find("control") != std::string::npos);
  CHECK(problem("redis://h :1").find("control") != std::string::npos);
  CHECK(problem("redis://h\x7f").find("control") != std::string::npos);
  CHECK(problem("redis://u:%zz@h").find("escape") != std::string::npos);
  CHECK(problem("redis://u:ab%4@h").find("escape") != std::string::npos);
  CHECK(problem("redis://u:ab%@h").find("escape") != std::string::npos);
  CHECK(problem("redis://@h").find("empty user name") != std::string::npos);
  CHECK(problem("redis://a%0Ab@h").find("control") != std::string::npos);
  CHECK(problem("redis://u:@h").find("password is empty") != std::string::npos);
  CHECK(problem("redis://:a%0Ab@h").find("control") != std::string::npos);
  CHECK(problem("redis://ho$t:1").find("host") != std::string::npos);
  CHECK(problem("redis://a..b").find("host") != std::string::npos);
  CHECK(problem(("redis://" + std::string(64, 'a') + ".b").c_str()).find("host") != std::string::npos);
  CHECK(problem(("redis://h/" + std::string(5000, '1')).c_str()).find("4096") != std::string::npos);
  CHECK_THROWS_AS(parse_url("redis://h:0"), std::invalid_argument);
  CHECK_THROWS_WITH(parse_url("redis://h:0"), doctest::Contains("port"));
}

TEST_CASE("redis: url problems never show the password") {
  const std::string secret = "Hunter2Secret";
  const std::string bad[] = {
      "redis://u:" + secret + "@h:0",                    // bad port
      "redis://u:" + secret + "@h/abc",                  // bad database
      "http://u:" + secret + "@h",                       // other scheme
      "redis://u:" + secret + "@h?x=1",                  // query
      "redis://u:" + secret + "%zz@h",                   // bad escape
      "redis://u:pa/" + secret + "@h",                   // an unescaped '/' in the password
      "redis://u:" + secret + "/x@h",                    // the same, '/' after it
      "redis://u:" + secret + "@@h:99999",               // two '@'
      "redis://u:" + secret + "://x@h:0",                // "://" in the password
      "u:" + secret + "@h",                              // no scheme
      "redis://:" + std::string(600, 'x') + secret + "@h", // too long a password, shown cut
      "redis://:" + secret + std::string(300, 'y') + "@h:0",
      "redis://:" + secret + "\n@h",                     // control character
  };
  for (const auto& url : bad) {
    CAPTURE(url);
    const auto problem = url_problem(url);
    REQUIRE(problem.has_value());
    CHECK(problem->find(secret) == std::string::npos);
    CHECK(problem->find("Secret") == std::string::npos);
    CHECK(problem->find("Hunter") == std::string::npos);
    CHECK(problem->find("yyyy") == std::string::npos);
    CHECK(problem->find("xxxx") == std::string::npos);
    try {
      parse_url(url);
      FAIL("parse_url accepted it");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find(secret) == std::string::npos);
    }
  }
}
