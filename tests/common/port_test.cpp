#include <common/port.hpp>

#include <doctest/doctest.h>

using coretry::common::parse_port;
using coretry::common::port_zero;

TEST_CASE("parse_port: 1 to 65535") {
  CHECK(parse_port("1") == 1);
  CHECK(parse_port("80") == 80);
  CHECK(parse_port("8080") == 8080);
  CHECK(parse_port("65535") == 65535);
  CHECK(parse_port("00080") == 80);
}

TEST_CASE("parse_port: 0 only where it picks a free port") {
  CHECK_FALSE(parse_port("0").has_value());
  CHECK_FALSE(parse_port("00").has_value());
  CHECK(parse_port("0", port_zero::picks_free) == 0);
  CHECK(parse_port("65535", port_zero::picks_free) == 65535);
}

TEST_CASE("parse_port: anything but a number from the range is refused") {
  for (const auto zero : {port_zero::refused, port_zero::picks_free}) {
    CAPTURE(static_cast<int>(zero));
    CHECK_FALSE(parse_port("", zero).has_value());
    CHECK_FALSE(parse_port("65536", zero).has_value());
    CHECK_FALSE(parse_port("99999", zero).has_value());
    CHECK_FALSE(parse_port("80x", zero).has_value());
    CHECK_FALSE(parse_port("x80", zero).has_value());
    CHECK_FALSE(parse_port("-1", zero).has_value());
    CHECK_FALSE(parse_port("+80", zero).has_value());
    CHECK_FALSE(parse_port(" 80", zero).has_value());
    CHECK_FALSE(parse_port("80 ", zero).has_value());
    CHECK_FALSE(parse_port("000080", zero).has_value()); // six digits
    CHECK_FALSE(parse_port("18446744073709551697", zero).has_value()); // 2^64 + 81: no wrap-around
  }
}
