// coretry::net's pieces of an authority, the ones every reader of a port, a
// host or an escape in coretry uses (HTTP URLs, proxies and pinned names,
// Redis URLs, the programs' ports).

#include <coretry/net/authority.hpp>

#include <doctest/doctest.h>

#include <optional>
#include <string>

using coretry::net::is_dns_name;
using coretry::net::parse_port;
using coretry::net::percent_decoded;
using coretry::net::port_zero;

TEST_CASE("parse_port reads 1 to 65535 written in digits alone, 0 only when allowed") {
  CHECK(parse_port("1") == 1);
  CHECK(parse_port("80") == 80);
  CHECK(parse_port("65535") == 65535);
  CHECK(parse_port("08080") == 8080);
  CHECK(parse_port("00000000000443") == 443); // leading zeros of any number
  CHECK_FALSE(parse_port("0").has_value());
  CHECK(parse_port("0", port_zero::allowed) == 0);
  CHECK(parse_port("000", port_zero::allowed) == 0);
  for (const char* refused : {"", "65536", "99999999999999999999", "+80", "-1", " 80", "80 ", "8o", "0x50", "１"}) {
    CAPTURE(refused);
    CHECK_FALSE(parse_port(refused).has_value());
    CHECK_FALSE(parse_port(refused, port_zero::allowed).has_value());
  }
}

TEST_CASE("is_dns_name counts 253 characters besides one final dot, and labels of at most 63") {
  const std::string label63(63, 'a');
  const std::string name253 = label63 + "." + label63 + "." + label63 + "." + std::string(61, 'b');
  REQUIRE(name253.size() == 253);
  CHECK(is_dns_name(name253));
  CHECK(is_dns_name(name253 + "."));
  CHECK_FALSE(is_dns_name(name253 + "b"));
  CHECK_FALSE(is_dns_name(name253 + ".."));
  CHECK(is_dns_name("cache.example.com"));
  CHECK(is_dns_name("under_score.example"));
  CHECK(is_dns_name("127.0.0.1"));
  CHECK(is_dns_name(label63 + ".example"));
  CHECK_FALSE(is_dns_name(label63 + "a.example"));
  for (const char* refused : {"", ".", "..", "a..b", ".a", "a b", "a%00b", "a:b", "[::1]", "é.example"}) {
    CAPTURE(refused);
    CHECK_FALSE(is_dns_name(refused));
  }
}

TEST_CASE("percent_decoded decodes %XY escapes and refuses cut or non-hexadecimal ones") {
  CHECK(percent_decoded("a%41%62c") == std::optional<std::string>("aAbc"));
  CHECK(percent_decoded("p%40ss%3Aw") == std::optional<std::string>("p@ss:w"));
  CHECK(percent_decoded("a+b") == std::optional<std::string>("a+b"));
  CHECK(percent_decoded("%00") == std::optional<std::string>(std::string(1, '\0')));
  CHECK(percent_decoded("") == std::optional<std::string>(""));
  for (const char* refused : {"%", "%4", "a%4", "%G1", "%1g", "%%41"}) {
    CAPTURE(refused);
    CHECK_FALSE(percent_decoded(refused).has_value());
  }
}
