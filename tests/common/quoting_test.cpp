#include <common/quoting.hpp>

#include <doctest/doctest.h>

#include <string>

using coretry::common::quoted;
using namespace std::string_literals;

TEST_CASE("quoted: plain text stands between single quotes") {
  CHECK(quoted("80x") == "'80x'");
  CHECK(quoted("") == "''");
  CHECK(quoted("a b/c.d") == "'a b/c.d'");
}

TEST_CASE("quoted: control bytes and DEL are written as \\xHH") {
  CHECK(quoted("line\nnext") == "'line\\x0anext'");
  CHECK(quoted("\r\t") == "'\\x0d\\x09'");
  CHECK(quoted("\x1b[2J") == "'\\x1b[2J'");
  CHECK(quoted("a\x7f") == "'a\\x7f'");
  CHECK(quoted("nul"s + '\0' + "byte") == "'nul\\x00byte'");
  CHECK(quoted("\x1f") == "'\\x1f'");
}

TEST_CASE("quoted: a quote or backslash inside is escaped, so the end of the value is clear") {
  CHECK(quoted("it's") == "'it\\'s'");
  CHECK(quoted("a\\b") == "'a\\\\b'");
  CHECK(quoted("\\x0a") == "'\\\\x0a'"); // typed text never reads as an escaped byte
}

TEST_CASE("quoted: bytes above ASCII (UTF-8) are kept") {
  CHECK(quoted("caf\xc3\xa9") == "'caf\xc3\xa9'");
  CHECK(quoted("\xff") == "'\xff'");
}
