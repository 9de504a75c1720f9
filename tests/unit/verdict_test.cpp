// The names of attempt statuses and deliveries, as logs and JSON show them.

#include <coretry/verdict.hpp>

#include <doctest/doctest.h>

TEST_CASE("verdict: every attempt status has its stable name") {
  CHECK(coretry::to_string(coretry::attempt_status::success) == "success");
  CHECK(coretry::to_string(coretry::attempt_status::transient) == "transient");
  CHECK(coretry::to_string(coretry::attempt_status::permanent) == "permanent");
  CHECK(coretry::to_string(static_cast<coretry::attempt_status>(42)) == "invalid");
}

TEST_CASE("verdict: every delivery has its stable name") {
  CHECK(coretry::to_string(coretry::delivery::unknown) == "unknown");
  CHECK(coretry::to_string(coretry::delivery::never_sent) == "never_sent");
  CHECK(coretry::to_string(coretry::delivery::answered) == "answered");
  CHECK(coretry::to_string(static_cast<coretry::delivery>(42)) == "invalid");
}
