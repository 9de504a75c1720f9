// What coretry::redis takes from coretry::net: a Redis URL's host checked as
// an HTTP URL's is, its port read by the one port reader, and TLS files of the
// type the HTTP client's are.

#include <coretry/http/tls.hpp>
#include <coretry/net/tls_files.hpp>
#include <coretry/redis/shared_state.hpp>
#include <coretry/redis/url.hpp>

#include <doctest/doctest.h>

#include <string>
#include <type_traits>

TEST_CASE("redis: a URL's host is checked as an HTTP URL's is, 253 characters besides a final dot") {
  const std::string host = std::string(63, 'a') + "." + std::string(63, 'a') + "." + std::string(63, 'a') + "." +
                           std::string(61, 'b');
  CHECK_FALSE(coretry::redis::url_problem("redis://" + host + ":6379").has_value());
  CHECK_FALSE(coretry::redis::url_problem("redis://" + host + ".:6379").has_value());
  CHECK(coretry::redis::url_problem("redis://" + host + "b:6379").has_value());
  CHECK(coretry::redis::parse_url("redis://h:06380").port == 6380);
}

TEST_CASE("redis: the reconciler's TLS files are the HTTP client's type, with a key password") {
  static_assert(std::is_same_v<coretry::http::tls_files, coretry::net::tls_files>);
  static_assert(std::is_same_v<coretry::redis::shared_state::options::tls_files, coretry::net::tls_files>);
  coretry::net::tls_files files{"ca.pem", "client.pem", "client.key", "secret"};
  CHECK(files.key_password == "secret");
}
