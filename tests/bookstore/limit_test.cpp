// The bookstore's concurrency limit on pricing: its option, and a call that
// finds no permit answered 503 at once without calling pricing.

#include "bookstore/bookstore.hpp"
#include "bookstore_support.hpp"
#include "server_thread.hpp"

#include <coretry/stop_reason.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

namespace bookstore = coretry::bookstore;
using namespace std::chrono_literals;
using coretry::test::server_thread;
using namespace bookstore_tests;

TEST_CASE("--concurrency-limit takes adaptive, off or a number of permits, and refuses anything else by name") {
  bookstore::options o;
  REQUIRE(o.concurrency_limit); // adaptive by default
  CHECK(o.concurrency_limit->adaptive);
  bookstore::apply_concurrency_limit("off", o);
  CHECK_FALSE(o.concurrency_limit);
  bookstore::apply_concurrency_limit("adaptive", o);
  REQUIRE(o.concurrency_limit);
  CHECK(o.concurrency_limit->adaptive);
  bookstore::apply_concurrency_limit("12", o);
  REQUIRE(o.concurrency_limit);
  CHECK_FALSE(o.concurrency_limit->adaptive);
  CHECK(o.concurrency_limit->initial_limit == 12);
  bookstore::apply_concurrency_limit("100000", o);
  CHECK(o.concurrency_limit->initial_limit == 100000);
  for (const char* bad : {"", "0", "-1", "100001", "12.5", " 12", "12 ", "Adaptive", "on", "1e3", "99999999999"}) {
    CAPTURE(bad);
    try {
      bookstore::apply_concurrency_limit(bad, o);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string{e.what()}.starts_with("--concurrency-limit '"));
    }
  }
  // A refusal is a 503, with no Retry-After: nothing is known of when a permit frees.
  const bookstore::failure_answer refused = bookstore::answer_for(coretry::stop_reason::concurrency_limited, false,
                                                                  true, 100ms);
  CHECK(refused.status == 503);
  CHECK_FALSE(refused.retry_after);
}

TEST_CASE("with no permit free a call is answered 503 at once, pricing is not called, and /metrics counts it") {
  server_thread pricing;
  bookstore::options o = options_for(pricing.url("/status/200?delay=400"));
  bookstore::apply_concurrency_limit("1", o);
  bookstore_runner store{o};
  const auto port = port_of(store->base_url());
  // The first call holds the only permit for 400 ms.
  auto first = std::async(std::launch::async, [port] { return get(port, "/books/1"); });
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (metric(store->metrics(), R"(coretry_concurrency_in_flight{dependency="pricing"})") < 1 &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);
  REQUIRE(metric(store->metrics(), R"(coretry_concurrency_in_flight{dependency="pricing"})") == 1);

  const auto start = std::chrono::steady_clock::now();
  const http_reply refused = get(port, "/books/2");
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(refused.status == 503);
  CHECK(refused.fields.at("x-coretry-stop") == "concurrency_limited");
  CHECK(refused.fields.at("x-coretry-attempts") == "0");
  CHECK(refused.fields.count("Retry-After") == 0);
  CHECK(took < 200ms); // the wait for a permit is 5 ms; the first call still holds it
  CHECK(first.get().status == 200);
  CHECK(pricing->log().size() == 1);

  const std::string text = store->metrics();
  CHECK(metric(text, R"(coretry_concurrency_limit{dependency="pricing"})") == 1);
  CHECK(metric(text, R"(coretry_concurrency_in_flight{dependency="pricing"})") == 0);
  CHECK(metric(text, R"(coretry_concurrency_permits_total{dependency="pricing",result="refused"})") == 1);
  CHECK(metric(text, R"(coretry_concurrency_permits_total{dependency="pricing",result="waited"})") == 1);
  CHECK(metric(text, R"(coretry_permit_waits_total{route="/books/{id}",result="refused"})") == 1);
  CHECK(metric(text, R"(coretry_stops_total{route="/books/{id}",reason="concurrency_limited"})") == 1);
}
