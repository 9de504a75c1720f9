#include <coretry/budget.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <vector>

TEST_CASE("budget: starts full, refills a token per ten initial requests, never past capacity") {
  coretry::token_bucket_budget budget;
  CHECK(budget.tokens() == 20.0);
  int granted = 0;
  while (budget.try_acquire_retry()) ++granted;
  CHECK(granted == 20);
  for (int i = 0; i < 9; ++i) budget.record_initial_request();
  CHECK_FALSE(budget.try_acquire_retry()); // 0.9 of a token is not a token
  budget.record_initial_request();
  CHECK(budget.try_acquire_retry());
  for (int i = 0; i < 1000; ++i) budget.record_initial_request();
  CHECK(budget.tokens() == 20.0);
}

TEST_CASE("budget: bad options are refused by name") {
  CHECK_THROWS_WITH_AS(coretry::token_bucket_budget({.capacity = 0}), doctest::Contains("capacity"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(coretry::token_bucket_budget({.capacity = 5, .tokens_per_initial_request = -1}),
                       doctest::Contains("tokens_per_initial_request"), std::invalid_argument);
}
