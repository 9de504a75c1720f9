// The bookstore in-process and as a program, against the fault server on
// loopback: what each layer sent downstream is read from the fault server's
// request log (counts and header values), never inferred from timing.

#include "bookstore/bookstore.hpp"
#include "bookstore_support.hpp"

#include "faults/hostile.hpp"
#include "eventually.hpp"
#include "policies.hpp"
#include "program.hpp"
#include "server_thread.hpp"
#include "skip.hpp"
#if CORETRY_BOOKSTORE_TESTS_REDIS
#include "redis/redis_server.hpp"
#endif

#include <coretry/http/client.hpp>
#include <coretry/stop_reason.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <sys/socket.h>
#include <sys/time.h>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace bookstore = coretry::bookstore;
using namespace std::chrono_literals;
using coretry::test::eventually;
using coretry::test::listening_program;
using coretry::test::server_thread;
using namespace bookstore_tests;

namespace {

std::optional<std::string> field(const coretry::faults::logged_request& r, std::string_view name) {
  for (const auto& [n, v] : r.fields)
    if (beast::iequals(n, name)) return v;
  return std::nullopt;
}

/// A gate that closes after a few failures (10 results in its window instead
/// of 100) and holds no retry: a retry whose slot is not free at once is
/// denied, so that sequential requests meet denials rather than short waits.
bookstore::options gated_options(const std::string& pricing_url) {
  bookstore::options o = options_for(pricing_url);
  o.gate_options.min_requests = 10;
  o.gate_options.max_hold = 1ms;
  return o;
}

/// Whether the sample reaches `value` within 3 s: a server may count a
/// refusal just after its client has seen the connection close.
bool metric_reaches(bookstore_runner& store, const std::string& key, double value) {
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (metric(store->metrics(), key) < value && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(10ms);
  return metric(store->metrics(), key) == value;
}

} // namespace

TEST_SUITE("bookstore") {

TEST_CASE("a book is priced through the dependency, and unknown paths and ids are 404") {
  server_thread pricing;
  bookstore_runner store{options_for(pricing.url("/status/200?body=%7B%22price%22%3A12%7D"))};
  const auto port = port_of(store->base_url());
  const http_reply ok = get(port, "/books/978-0-13");
  CHECK(ok.status == 200);
  CHECK(ok.body == R"({"book":"978-0-13","pricing":{"price":12}})");
  CHECK(get(port, "/books/").status == 404);
  CHECK(get(port, "/books/a%2Fb").status == 404);
  CHECK(get(port, "/nowhere").status == 404);
  CHECK(pricing->log().size() == 1);
  CHECK(bookstore::pricing_target("http://p/books/{id}?x=1", "42") == "http://p/books/42?x=1");
  CHECK(bookstore::pricing_target("http://p/status/200", "42") == "http://p/status/200");
}

TEST_CASE("the deadline header is clamped, less the reserve, and propagated per attempt") {
  server_thread pricing;
  bookstore::options o = options_for(pricing.url("/status/200"));
  o.max_deadline = 1000ms;
  o.reserve = 10ms;
  o.policy.attempt_limit = 5s; // the deadline, not the attempt limit, bounds each attempt here
  bookstore_runner store{o};
  const auto port = port_of(store->base_url());

  // Asked for far more than the local maximum: clamped to 1000 - 10 reserve
  // - 50 completion reserve = 940 ms for the attempt at most.
  REQUIRE(get(port, "/books/1", {{"x-coretry-deadline-ms", "3600000"}}).status == 200);
  // Asked for 500: 500 - 10 - 50 = 440 ms at most.
  REQUIRE(get(port, "/books/2", {{"x-coretry-deadline-ms", "500"}}).status == 200);
  // No header: the local maximum.
  REQUIRE(get(port, "/books/3").status == 200);
  // An absurdly long number saturates and is clamped too.
  REQUIRE(get(port, "/books/4", {{"x-coretry-deadline-ms", "99999999999999999999999"}}).status == 200);

  const auto log = pricing->log();
  REQUIRE(log.size() == 4);
  const auto sent = [&](std::size_t i) { return std::stoll(field(log[i], "x-coretry-deadline-ms").value()); };
  CHECK(sent(0) <= 940);
  CHECK(sent(0) > 840);
  CHECK(sent(1) <= 440);
  CHECK(sent(1) > 340);
  CHECK(sent(2) <= 940);
  CHECK(sent(3) <= 940);
  CHECK(field(log[0], "x-coretry-attempt") == "1");
  CHECK(field(log[0], "x-coretry-retries") == "upstream");
}

TEST_CASE("each attempt carries its number and the time until its own deadline") {
  server_thread pricing;
  bookstore::options o = options_for(pricing.url("/status/503"));
  o.max_deadline = 2000ms;
  o.reserve = 10ms;
  o.policy.attempt_limit = 300ms; // shorter than what the deadline leaves the first attempts
  bookstore_runner store{o};
  REQUIRE(get(port_of(store->base_url()), "/books/1").status == 503);
  const auto log = pricing->log();
  REQUIRE(log.size() == 3);
  // Each attempt's deadline is measured from its own start, so successive
  // values need not decrease while the whole deadline is far away.
  for (std::size_t i = 0; i < log.size(); ++i) {
    CAPTURE(i);
    CHECK(field(log[i], "x-coretry-attempt") == std::to_string(i + 1));
    const auto sent = std::stoll(field(log[i], "x-coretry-deadline-ms").value());
    CHECK(sent <= 300); // the attempt limit, not the whole deadline
    CHECK(sent > 200);
  }
  // Without coordination neither retry header goes out (the deadline still does).
  server_thread plain_pricing;
  bookstore::options p = options_for(plain_pricing.url("/status/200"), false);
  bookstore_runner plain{p};
  REQUIRE(get(port_of(plain->base_url()), "/books/1", {{"x-coretry-retries", "upstream"}}).status == 200);
  REQUIRE(plain_pricing->log().size() == 1);
  CHECK_FALSE(field(plain_pricing->log()[0], "x-coretry-attempt"));
  CHECK_FALSE(field(plain_pricing->log()[0], "x-coretry-retries"));
  CHECK(field(plain_pricing->log()[0], "x-coretry-deadline-ms"));
}

TEST_CASE("with too little time left the answer is 504 at once and the dependency is not called") {
  server_thread pricing;
  bookstore::options o = options_for(pricing.url("/status/200"));
  o.max_deadline = 1000ms;
  o.reserve = 10ms;
  o.policy.min_attempt_allowance = 100ms;
  o.policy.completion_reserve = 50ms;
  bookstore_runner store{o};
  const auto port = port_of(store->base_url());
  // 159 - 10 = 149 ms: less than the 100 ms minimum attempt plus 50 ms reserve.
  for (const char* asked : {"0", "1", "100", "159"}) {
    CAPTURE(asked);
    CHECK(get(port, "/books/1", {{"x-coretry-deadline-ms", asked}}).status == 504);
  }
  CHECK(pricing->log().empty());
  CHECK(metric(store->metrics(), "bookstore_deadline_rejections_total") == 4);
  CHECK(metric(store->metrics(), R"(bookstore_responses_total{route="/books/{id}",code="504"})") == 4);
  // A malformed value is refused, also without a call.
  CHECK(get(port, "/books/1", {{"x-coretry-deadline-ms", "-5"}}).status == 400);
  CHECK(get(port, "/books/1", {{"x-coretry-deadline-ms", "1.5"}}).status == 400);
  CHECK(pricing->log().empty());
  // Enough time: called.
  CHECK(get(port, "/books/1", {{"x-coretry-deadline-ms", "300"}}).status == 200);
  CHECK(pricing->log().size() == 1);
}

TEST_CASE("three layers of three attempts: 27 pricing calls without coordination, 3 with it") {
  for (const bool coordination : {false, true}) {
    CAPTURE(coordination);
    server_thread pricing;
    bookstore_runner gateway{options_for(pricing.url("/status/503"), coordination)};
    bookstore_runner store{options_for(gateway.url("/books/{id}"), coordination)};

    // The outermost layer: a coretry client with 3 attempts that, when
    // coordinating, says that it owns the retries.
    asio::io_context io;
    coretry::http::client client{io.get_executor()};
    coretry::http::request_options ro;
    ro.policy = quick_policy();
    ro.decorate = [coordination](coretry::http::request& r, const coretry::attempt_context<std::chrono::steady_clock>& c) {
      r.set("x-coretry-deadline-ms", "15000");
      if (coordination) {
        r.set("x-coretry-attempt", std::to_string(c.number));
        r.set("x-coretry-retries", "upstream");
      }
    };
    auto future = client.async_send(store.url("/books/42"), coretry::http::request{bhttp::verb::get, "", 11}, ro,
                                    asio::use_future);
    io.run();
    const coretry::http::result result = future.get();
    CHECK(result.reason == coretry::stop_reason::attempts_exhausted);
    CHECK(result.attempts == 3);
    REQUIRE(result.value);
    REQUIRE(result.value->res);
    CHECK(result.value->res->result_int() == 503);

    const auto log = pricing->log();
    if (!coordination) {
      CHECK(log.size() == 27);
    } else {
      CHECK(log.size() <= 3);
      CHECK(log.size() == 3);
      for (const auto& r : log) CHECK(field(r, "x-coretry-retries") == "upstream");
    }
    // Every layer passed a deadline down, shrinking on the way.
    for (const auto& r : log) CHECK(std::stoll(field(r, "x-coretry-deadline-ms").value()) < 15000);
  }
}

TEST_CASE("with coordination, a plain caller leaves the retries to the first bookstore only") {
  server_thread pricing;
  bookstore_runner gateway{options_for(pricing.url("/status/503"))};
  bookstore_runner store{options_for(gateway.url("/books/{id}"))};
  CHECK(get(port_of(store->base_url()), "/books/7").status == 503);
  CHECK(pricing->log().size() == 3); // the store's 3 attempts, one pricing call each
  // A request that is itself a retry gets a single attempt.
  pricing->clear();
  CHECK(get(port_of(store->base_url()), "/books/7", {{"x-coretry-attempt", "2"}}).status == 503);
  CHECK(pricing->log().size() == 1);
  CHECK(metric(gateway->metrics(), "bookstore_single_attempt_requests_total") == 4);
}

TEST_CASE("one retry budget for the whole process, shared by all threads") {
  server_thread pricing;
  bookstore::options o = options_for(pricing.url("/status/503"));
  o.gate = false; // the budget alone: 100 failing operations would close the gate
  bookstore_runner store{o, 4};
  const auto port = port_of(store->base_url());
  constexpr int requests = 100;
  std::vector<std::thread> callers;
  std::atomic<int> answered_503{0};
  for (int t = 0; t < 8; ++t)
    callers.emplace_back([&, t] {
      for (int i = t; i < requests; i += 8)
        if (get(port, "/books/" + std::to_string(i)).status == 503) ++answered_503;
    });
  for (auto& c : callers) c.join();
  CHECK(answered_503 == requests);
  // 100 operations may add at most 20 + 100/10 = 30 retries between them;
  // per-handler budgets would have allowed 200.
  const auto calls = pricing->log().size();
  CHECK(calls >= requests);
  CHECK(calls <= requests + 30);
  const std::string text = store->metrics();
  const double denied = metric(text, R"(coretry_stops_total{route="/books/{id}",reason="budget_exhausted"})");
  const double exhausted = metric(text, R"(coretry_stops_total{route="/books/{id}",reason="attempts_exhausted"})");
  CHECK(denied + exhausted == requests);
  CHECK(denied >= requests - 15); // at most 15 operations can have had both retries
  CHECK(metric(text, R"(coretry_attempts_total{route="/books/{id}"})") == static_cast<double>(calls));
  CHECK(metric(text, R"(coretry_budget_tokens{dependency="pricing"})") < 1.0 + 1e-9);
}

TEST_CASE("/metrics is Prometheus text with the expected series and bounded labels") {
  server_thread pricing;
  bookstore_runner store{options_for(pricing.url("/status/503?percent=50"))};
  const auto port = port_of(store->base_url());
  for (int i = 0; i < 30; ++i) get(port, "/books/unique-" + std::to_string(i) + "?q=" + std::to_string(i));
  get(port, "/some/other/path");
  http_reply res = get(port, "/metrics");
  REQUIRE(res.status == 200);
  CHECK(res.fields["Content-Type"].starts_with("text/plain; version=0.0.4"));
  const auto samples = parse_metrics(res.body);

  for (const char* series :
       {"coretry_operations_total", "coretry_attempts_total", "coretry_initial_successes_total",
        "coretry_successes_total", "coretry_attempts_per_operation_bucket", "coretry_attempts_per_operation_sum",
        "coretry_attempts_per_operation_count", "coretry_backoff_seconds_total", "coretry_cancellations_total",
        "coretry_stops_total", "coretry_budget_tokens", "coretry_attempt_failures_total", "coretry_gate_open",
        "coretry_gate_level", "coretry_gate_answers_total", "bookstore_responses_total",
        "coretry_http_phase_duration_seconds_count"}) {
    CAPTURE(series);
    CHECK(std::any_of(samples.begin(), samples.end(),
                      [&](const auto& s) { return s.first.starts_with(std::string{series} + "{"); }));
    std::string family{series}; // a histogram's _bucket, _sum and _count share one TYPE line
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (family.ends_with(suffix) && (family.starts_with("coretry_attempts_per_operation") ||
                                       family.starts_with("coretry_http_phase_duration_seconds")))
        family.resize(family.size() - std::string_view{suffix}.size());
    CHECK(res.body.find("# TYPE " + family + " ") != std::string::npos);
  }
  CHECK(metric(res.body, R"(coretry_operations_total{route="/books/{id}"})") == 30);
  CHECK(metric(res.body, R"(coretry_attempts_per_operation_count{route="/books/{id}"})") == 30);
  CHECK(metric(res.body, R"(coretry_attempts_total{route="/books/{id}"})") == pricing->log().size());

  // Label values only from bounded sets: never an id, a query or a raw path.
  std::set<std::string> stop_names;
  for (int i = 0; i < coretry::stop_reason_count; ++i)
    stop_names.insert(std::string{coretry::to_string(static_cast<coretry::stop_reason>(i))});
  const std::regex label{R"re(([a-z_]+)="([^"]*)")re"};
  for (const auto& [key, value] : samples) {
    CAPTURE(key);
    for (std::sregex_iterator it{key.begin(), key.end(), label}, end; it != end; ++it) {
      const std::string name = (*it)[1], v = (*it)[2];
      if (name == "route") CHECK((v == "/books/{id}" || v == "/metrics" || v == "other"));
      else if (name == "reason") CHECK(stop_names.count(v) == 1);
      else if (name == "cause")
        CHECK((v == "header_timeout" || v == "idle_timeout" || v == "header_too_large" || v == "body_too_large" ||
               v == "malformed"));
      else if (name == "category") CHECK(std::regex_match(v, std::regex{"[a-z0-9_]+"}));
      else if (name == "code") CHECK(std::regex_match(v, std::regex{"[0-9]{3}|other"}));
      else if (name == "le") CHECK(std::regex_match(v, std::regex{"[0-9]+(\\.[0-9]+)?|\\+Inf"}));
      else if (name == "result")
        CHECK((v == "success" || v == "timeout" || v == "failure" || v == "sent" || v == "won" ||
               v == "refused_budget" || v == "refused_gate" || v == "refused_limit" || v == "granted" ||
               v == "refused" || v == "acquired" || v == "waited"));
      else if (name == "dependency") CHECK(v == "pricing");
      else if (name == "connection") CHECK((v == "new" || v == "reused"));
      else if (name == "phase")
        CHECK((v == "pool_wait" || v == "lookup" || v == "connect" || v == "tls" || v == "write" ||
               v == "first_byte" || v == "read"));
      else if (name == "answer")
        CHECK((v == "admitted" || v == "probe" || v == "held" || v == "denied" || v == "throttled"));
      else FAIL("unexpected label ", name);
    }
  }
  for (const char* series : {"bookstore_refused_requests_total", "bookstore_accept_errors_total"}) {
    CAPTURE(series);
    CHECK(res.body.find("# TYPE " + std::string{series} + " counter") != std::string::npos);
  }
  CHECK(res.body.find("unique-") == std::string::npos);
  CHECK(res.body.find("/some/other") == std::string::npos);
}

TEST_CASE("shutdown stops accepting, closes idle connections and cancels a sleeping call at once") {
  server_thread pricing;
  bookstore::options o = options_for(pricing.url("/status/503"));
  o.policy.backoff.initial_window = 30s; // a call asleep for 30 s
  o.policy.backoff.max_window = 30s;
  o.policy.backoff.jitter = coretry::jitter_kind::none;
  o.max_deadline = 60s;
  o.shutdown_grace = 30s; // only the sleep, not the grace, can end this call early
  asio::io_context io;
  std::optional<bookstore::server> store;
  o.listen = "127.0.0.1:0";
  store.emplace(io, o);
  std::thread runner{[&] { io.run(); }};
  const auto port = store->port();

  // An idle keep-alive connection, and a request asleep in backoff.
  asio::io_context client_io;
  asio::ip::tcp::socket idle{client_io};
  idle.connect({asio::ip::make_address("127.0.0.1"), port});
  std::optional<http_reply> reply;
  std::thread caller{[&] { reply = get(port, "/books/1"); }};
  REQUIRE(eventually([&] { return pricing->log().size() == 1; }, 10s));
  REQUIRE(eventually([&] { return store->open_connections() == 2; }, 10s));

  std::promise<void> closed;
  store->shutdown([&] { closed.set_value(); });
  // Everything ends without the 30 s sleep or grace running out.
  REQUIRE(closed.get_future().wait_for(10s) == std::future_status::ready);
  caller.join();
  runner.join(); // run() returned: the server holds no work
  REQUIRE(reply);
  CHECK(reply->status == 503);
  CHECK(reply->fields["x-coretry-stop"] == "cancelled");
  CHECK(pricing->log().size() == 1);
  CHECK(store->open_connections() == 0);
  CHECK(metric(store->metrics(), R"(coretry_cancellations_total{route="/books/{id}"})") == 1);
  // The idle connection was closed by the server, and nobody listens any more.
  char byte;
  boost::system::error_code error;
  idle.read_some(asio::buffer(&byte, 1), error);
  CHECK(error == asio::error::eof);
  asio::ip::tcp::socket late{client_io};
  late.connect({asio::ip::make_address("127.0.0.1"), port}, error);
  CHECK(error == asio::error::connection_refused);
  store.reset();
}

TEST_CASE("--attempt-timeout takes milliseconds or a percentile, and refuses anything else by name") {
  coretry::policy p;
  bookstore::apply_attempt_timeout("p99.9", p);
  REQUIRE(p.observed);
  CHECK(p.observed->percentile == 99.9);
  CHECK(p.observed->margin == 1.5);
  CHECK(p.observed->floor == 10ms);
  CHECK(p.observed->ceiling == coretry::duration::max());
  bookstore::apply_attempt_timeout("p50", p);
  CHECK(p.observed->percentile == 50);
  bookstore::apply_attempt_timeout("p100", p);
  CHECK(p.observed->percentile == 100);
  bookstore::apply_attempt_timeout("180", p);
  CHECK_FALSE(p.observed);
  CHECK(p.attempt_limit == 180ms);
  for (const char* bad : {"", "p", "p0", "p-1", "p100.1", "p1e2", "pinf", "p.5", "p5.", "p9.9.9", "99.9", "-5", "0",
                          "3600001", "250ms", "p99.99999999999"}) {
    CAPTURE(bad);
    try {
      bookstore::apply_attempt_timeout(bad, p);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string{e.what()}.starts_with("--attempt-timeout '"));
    }
  }
}

TEST_CASE("--hedge-after takes milliseconds or a percentile, and refuses anything else by name") {
  coretry::policy p;
  bookstore::apply_hedge_after("p95", p);
  REQUIRE(p.hedging.delay_percentile);
  CHECK(*p.hedging.delay_percentile == 95);
  CHECK(p.hedging.min_successes == 100);
  bookstore::apply_hedge_after("10", p);
  CHECK_FALSE(p.hedging.delay_percentile);
  CHECK(p.hedging.delay == 10ms);
  bookstore::apply_hedge_after("p99.9", p);
  CHECK(*p.hedging.delay_percentile == 99.9);
  for (const char* bad : {"", "p", "p0", "p100.1", "pinf", "p.5", "0", "60001", "10ms", "-1"}) {
    CAPTURE(bad);
    coretry::policy q;
    try {
      bookstore::apply_hedge_after(bad, q);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string{e.what()}.starts_with("--hedge-after '"));
    }
  }
}

TEST_CASE("with a percentile hedge delay, pricing's latencies are tracked and calls are served") {
  server_thread pricing;
  bookstore::options o = options_for(pricing.url("/status/200?delay=2"));
  o.policy.hedging.max_hedges = 1;
  bookstore::apply_hedge_after("p95", o.policy);
  bookstore_runner store{o};
  const auto port = port_of(store->base_url());
  for (int i = 0; i < 20; ++i) REQUIRE(get(port, "/books/b" + std::to_string(i)).status == 200);
  const std::string text = get(port, "/metrics").body;
  // Fewer than 100 successes: no hedge was sent on a delay.
  CHECK(metric(text, R"(coretry_hedges_total{route="/books/{id}",result="sent"})") == 0);
  CHECK(pricing->log().size() == 20);
}

TEST_CASE("with a percentile attempt limit, /metrics shows the attempt histogram and the current limit") {
  server_thread pricing;
  bookstore::options o = options_for(pricing.url("/status/200?delay=5"));
  bookstore::apply_attempt_timeout("p99.9", o.policy);
  bookstore_runner store{o};
  const auto port = port_of(store->base_url());
  for (int i = 0; i < 60; ++i) REQUIRE(get(port, "/books/b" + std::to_string(i)).status == 200);
  const std::string text = get(port, "/metrics").body;
  // Every call pricing received is one attempt in the histogram, on a new
  // connection or a reused one.
  const auto samples = parse_metrics(text);
  const auto sample = [&](const std::string& key) {
    const auto found = samples.find(key);
    return found == samples.end() ? 0.0 : found->second;
  };
  const std::string success = R"(coretry_attempt_duration_seconds_count{route="/books/{id}",result="success")";
  CHECK(sample(success + "}") == 0); // every attempt had a connection
  CHECK(sample(success + R"(,connection="new"})") >= 1);
  CHECK(sample(success + R"(,connection="new"})") + sample(success + R"(,connection="reused"})") ==
        pricing->log().size());
  CHECK(sample(R"(coretry_attempt_duration_seconds_bucket{route="/books/{id}",result="success",connection="new",le="0.002"})") ==
        0);
  // Past the warm-up (50 successes), the limit is learnt: 1.5 x p99.9 of
  // about 5 ms is below the 10 ms floor, unless the machine is very slow.
  const double limit = metric(text, R"(coretry_attempt_limit_seconds{route="/books/{id}"})");
  CHECK(limit >= 0.010);
  CHECK(limit < 0.5);
}

TEST_CASE("--pricing-resolve pins pricing's name to addresses: a refused one is passed over, ejections are metrics") {
  server_thread pricing;
  const std::string port = std::to_string(port_of(pricing.url("")));
  bookstore::options o = options_for("http://pricing:" + port + "/status/200?body=%7B%7D");
  // Nothing listens on 127.0.0.2 at this port: refused, and 127.0.0.1 is raced next.
  o.pricing_resolve = {"pricing:" + port + ":127.0.0.2,127.0.0.1"};
  bookstore_runner store{o};
  const auto bookstore_port = port_of(store->base_url());
  for (int i = 0; i < 3; ++i) CHECK(get(bookstore_port, "/books/" + std::to_string(i)).status == 200);
  CHECK(pricing->log().size() == 3);
  const std::string metrics = get(bookstore_port, "/metrics").body;
  CHECK(metric(metrics, R"(coretry_address_ejections_total{dependency="pricing"})") == 0);
  CHECK(metric(metrics, R"(coretry_addresses_ejected{dependency="pricing"})") == 0);
  CHECK(metric(metrics, R"(coretry_address_requests_total{address="127.0.0.1:)" + port + R"(",dependency="pricing"})") == 3);
  CHECK(metric(metrics, R"(coretry_address_requests_total{address="127.0.0.2:)" + port + R"(",dependency="pricing"})") == 0);

  bookstore::options bad = o;
  bad.pricing_resolve = {"pricing:" + port + ":[::1"};
  CHECK_THROWS_WITH_AS(bookstore::validate(bad), doctest::Contains("without its closing ']'"), std::invalid_argument);
}

TEST_CASE("--pricing-balance first_to_connect: every call goes to the first address that connects") {
  // Two pricing servers on one port, 127.0.0.3 and 127.0.0.1: both connect
  // at once, so the race's first, 127.0.0.3 (listed first), takes every
  // call; the balancer (least_cost) tries each.
  coretry::test::server_fleet fleet({"127.0.0.3", "127.0.0.1"});
  auto* first = &fleet[0];
  auto* second = &fleet[1];
  const std::string port = std::to_string(fleet.port());
  for (const auto mode : {coretry::http::balance_mode::first_to_connect, coretry::http::balance_mode::least_cost}) {
    CAPTURE(coretry::http::to_string(mode));
    const std::size_t before_first = (*first)->log().size(), before_second = (*second)->log().size();
    bookstore::options o = options_for("http://pricing:" + port + "/status/200?body=%7B%7D");
    o.pricing_resolve = {"pricing:" + port + ":127.0.0.3,127.0.0.1"};
    o.pricing_balance = mode;
    bookstore_runner store{o};
    const auto bookstore_port = port_of(store->base_url());
    for (int i = 0; i < 40; ++i) REQUIRE(get(bookstore_port, "/books/" + std::to_string(i)).status == 200);
    const std::size_t to_first = (*first)->log().size() - before_first;
    const std::size_t to_second = (*second)->log().size() - before_second;
    CHECK(to_first + to_second == 40);
    if (mode == coretry::http::balance_mode::first_to_connect) CHECK(to_second == 0);
    else CHECK(to_second > 0); // an address with no answer yet costs nothing: tried
  }
}

TEST_CASE("bad options are refused with a reason") {
  bookstore::options o;
  o.pricing_url = "ftp://x";
  CHECK_THROWS_AS(bookstore::validate(o), std::invalid_argument);
  o.pricing_url = "http://127.0.0.1:1/";
  CHECK_NOTHROW(bookstore::validate(o));
  o.listen = "localhost";
  CHECK_THROWS_AS(bookstore::validate(o), std::invalid_argument);
  o.listen = "127.0.0.1:70000";
  CHECK_THROWS_AS(bookstore::validate(o), std::invalid_argument);
  o.listen = "127.0.0.1:0";
  o.reserve = o.max_deadline;
  CHECK_THROWS_AS(bookstore::validate(o), std::invalid_argument);
  o.reserve = 10ms;
  CHECK_NOTHROW(bookstore::validate(o));
  {
    bookstore::options bad = o;
    bad.gate_options.probe_interval = 0ms;
    CHECK_THROWS_AS(bookstore::validate(bad), std::invalid_argument);
    bad.gate = false; // no gate: its options do not matter
    CHECK_NOTHROW(bookstore::validate(bad));
  }
  for (const std::size_t clients : {std::size_t{0}, bookstore::most_clients + 1}) {
    bookstore::options bad = o;
    bad.max_clients = clients;
    CHECK_THROWS_AS(bookstore::validate(bad), std::invalid_argument);
  }
  for (const auto timeout : {0ms, -1ms, std::chrono::milliseconds{25h}}) {
    bookstore::options bad = o;
    bad.limits.header_timeout = timeout;
    CHECK_THROWS_AS(bookstore::validate(bad), std::invalid_argument);
    bad = o;
    bad.limits.keep_alive_timeout = timeout;
    CHECK_THROWS_AS(bookstore::validate(bad), std::invalid_argument);
    bad = o;
    bad.limits.send_timeout = timeout;
    CHECK_THROWS_AS(bookstore::validate(bad), std::invalid_argument);
  }
}

TEST_CASE("the program refuses a bad command line with exit status 2") {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--listen", "127.0.0.1:0"}, // no --pricing
        {"--pricing", "http://127.0.0.1:1/", "--listen", "nonsense"},
        {"--pricing", "ftp://x"},
        {"--pricing", "http://127.0.0.1:1/", "--threads", "0"},
        {"--pricing", "http://127.0.0.1:1/", "--budget", "maybe"},
        {"--pricing", "http://127.0.0.1:1/", "--gate", "maybe"},
        {"--pricing", "http://127.0.0.1:1/", "--max-attempts", "x"},
        {"--pricing", "http://127.0.0.1:1/", "--header-timeout", "0"},
        {"--pricing", "http://127.0.0.1:1/", "--keep-alive-timeout", "-5"},
        {"--pricing", "http://127.0.0.1:1/", "--send-timeout", "0"},
        {"--pricing", "http://127.0.0.1:1/", "--max-clients", "0"},
        {"--pricing", "http://127.0.0.1:1/", "--max-clients", "many"},
        {"--pricing", "http://127.0.0.1:1/", "--attempt-timeout", "p0"},
        {"--pricing", "http://127.0.0.1:1/", "--attempt-timeout", "p100.5"},
        {"--pricing", "http://127.0.0.1:1/", "--attempt-timeout", "pnan"},
        {"--pricing", "http://127.0.0.1:1/", "--attempt-timeout", "0"},
        {"--pricing", "http://127.0.0.1:1/", "--hedge-after", "p0"},
        {"--pricing", "http://127.0.0.1:1/", "--hedge-after", "0"},
        {"--pricing", "http://127.0.0.1:1/", "--hedge-after", "60001"},
        {"--pricing", "http://127.0.0.1:1/", "--attempt-timeout", "p99.9", "--attempt-floor", "500",
         "--attempt-ceiling", "400"},
        {"--pricing", "http://pricing:1/", "--pricing-resolve", "pricing:1:nowhere"},
        {"--pricing", "http://pricing:1/", "--pricing-resolve", "pricing:1"},
        {"--pricing", "http://pricing:1/", "--pricing-balance", "round_robin"},
        {"--pricing", "http://127.0.0.1:1/", "--pricing-cacert", "/etc/hostname"},
        {"--pricing", "https://127.0.0.1:1/", "--pricing-cacert", "/nonexistent/ca.pem"},
        {"--pricing", "https://127.0.0.1:1/", "--pricing-cacert", "/etc/hostname"}}) {
    const auto result = coretry::test::run(bookstore_program, args, 10s);
    CAPTURE(result.err);
    CHECK(result.status == 2);
    CHECK(result.err.find("coretry-bookstore") != std::string::npos);
    if (std::find(args.begin(), args.end(), "--pricing-cacert") != args.end())
      CHECK(result.err.find("--pricing-cacert") != std::string::npos);
  }
}

TEST_CASE("a bad --shared-state URL, prefix or period exits 2 naming it, and never prints the password") {
  struct bad {
    std::vector<std::string> args;
    std::string named;
  };
  const std::string secret = "s3cr3t-pa55";
  for (const bad& b :
       {bad{{"--shared-state", "redis://:" + secret + "@127.0.0.1:99999"}, "port"},
        bad{{"--shared-state", "http://:" + secret + "@127.0.0.1:6379"}, "redis://"},
        bad{{"--shared-state", "redis://:" + secret + "@/0"}, "host"},
        bad{{"--shared-state", "redis://:" + secret + "@127.0.0.1:6379/x"}, "database"},
        bad{{"--shared-state", "redis://127.0.0.1:6379?db=1"}, "query"},
        bad{{"--shared-state", "redis://127.0.0.1:6379", "--shared-state-prefix", "a b"}, "prefix"},
        bad{{"--shared-state", "redis://127.0.0.1:6379", "--shared-state-prefix", "{x}"}, "prefix"},
        bad{{"--shared-state", "redis://127.0.0.1:6379", "--reconcile-period", "0"}, "reconcile-period"},
        bad{{"--shared-state", "redis://127.0.0.1:6379", "--shared-state-cacert", "/etc/hostname"}, "rediss://"},
        bad{{"--shared-state", "rediss://127.0.0.1:6379", "--shared-state-cacert", "/nonexistent/ca.pem"},
            "--shared-state-cacert: cannot read the CA file '/nonexistent/ca.pem'"},
        bad{{"--shared-state", "rediss://127.0.0.1:6379", "--shared-state-cert", "/etc/hostname"}, "needs its key"},
        bad{{"--shared-state", "rediss://127.0.0.1:6379", "--shared-state-password-file", "/nonexistent/pw"},
            "password file '/nonexistent/pw' cannot be read"},
        bad{{"--shared-state", "rediss://127.0.0.1:6379", "--shared-state-password-file", "/proc/self/environ"},
            "password file '/proc/self/environ'"}}) {
    std::vector<std::string> args{"--listen", "127.0.0.1:0", "--pricing", "http://127.0.0.1:1/"};
    args.insert(args.end(), b.args.begin(), b.args.end());
    ::setenv("CORETRY_REDIS_PASSWORD", secret.c_str(), 1); // in the environment the file above reads
    const auto result = coretry::test::run(bookstore_program, args, 10s);
    ::unsetenv("CORETRY_REDIS_PASSWORD");
    CAPTURE(b.args.back());
    CAPTURE(result.err);
    CHECK(result.status == 2);
    CHECK(result.err.find(b.named) != std::string::npos);
    CHECK(result.err.find(secret) == std::string::npos);
  }
  ::setenv("CORETRY_REDIS_USERNAME", "alone", 1);
  const auto alone = coretry::test::run(
      bookstore_program, {"--listen", "127.0.0.1:0", "--pricing", "http://127.0.0.1:1/", "--shared-state", "redis://h"},
      10s);
  ::unsetenv("CORETRY_REDIS_USERNAME");
  CHECK(alone.status == 2);
  CHECK(alone.err.find("CORETRY_REDIS_USERNAME needs a password") != std::string::npos);
  bookstore::options o;
  o.pricing_url = "http://127.0.0.1:1/";
  o.shared_state = "redis://user:" + secret + "@127.0.0.1:0";
  try {
    bookstore::validate(o);
    FAIL("a Redis URL with port 0 was taken");
  } catch (const std::invalid_argument& e) {
    const std::string why = e.what();
    CHECK(why.find("--shared-state") != std::string::npos);
    CHECK(why.find(secret) == std::string::npos);
  }
}

TEST_CASE("SIGTERM cancels a backoff sleep and an attempt in flight, and the program exits 0") {
  struct scenario {
    const char* name;
    std::string pricing_target;
    std::vector<std::string> extra;
  };
  // (1) asleep in a 30 s backoff; (2) an attempt that would take 30 s,
  // cancelled after the 300 ms grace. Either would hold the process for
  // 30 s; the bound asserted is a third of that.
  for (const scenario& s :
       {scenario{"backoff", "/status/503", {"--backoff-initial", "30000", "--backoff-max", "30000", "--jitter", "none"}},
        scenario{"in flight", "/status/200?delay=30000", {}}}) {
    CAPTURE(s.name);
    server_thread pricing;
    std::vector<std::string> args{"--listen", "127.0.0.1:0", "--pricing", pricing.url(s.pricing_target),
                                  "--threads", "2", "--max-deadline", "60000", "--attempt-timeout", "40000",
                                  "--shutdown-grace", "300"};
    args.insert(args.end(), s.extra.begin(), s.extra.end());
    listening_program store{bookstore_program, args};
    const auto port = store.port();

    std::optional<http_reply> reply;
    std::thread caller{[&] { reply = get(port, "/books/1"); }};
    REQUIRE(eventually([&] { return pricing->log().size() == 1; }, 10s));
    const auto signalled = std::chrono::steady_clock::now();
    const auto result = store.stop(SIGTERM, 20s);
    const auto took = std::chrono::steady_clock::now() - signalled;
    caller.join();
    CAPTURE(result.err);
    CHECK_FALSE(result.timed_out);
    CHECK(result.status == 0);
    CHECK(took < 10s);
    REQUIRE(reply);
    CHECK(reply->status == 503);
    CHECK(reply->fields["x-coretry-stop"] == "cancelled");
    CHECK(reply->fields["Connection"] == "close");
    CHECK(pricing->log().size() == 1); // nothing more was sent after the signal
  }
}

TEST_CASE("the program's --header-timeout and --keep-alive-timeout reach its server") {
  listening_program store{bookstore_program, {"--listen", "127.0.0.1:0", "--pricing", "http://127.0.0.1:9/{id}",
                                              "--header-timeout", "300", "--keep-alive-timeout", "400",
                                              "--max-clients", "8"}};
  const auto port = store.port();
  {
    hostile::raw_connection silent{port};
    const hostile::ending end = silent.wait_for_end(3s);
    CHECK(end.closed);
    CHECK(end.elapsed >= 250ms);
    CHECK(end.elapsed < 2s);
  }
  {
    hostile::raw_connection idle{port};
    REQUIRE(idle.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
    REQUIRE(idle.read_response(3s).starts_with("HTTP/1.1 200 "));
    const hostile::ending end = idle.wait_for_end(3s);
    CHECK(end.closed);
    CHECK(end.elapsed >= 350ms);
    CHECK(end.elapsed < 2s);
  }
  CHECK(store.stop(SIGTERM, 10s).status == 0);
}

TEST_CASE("the deadline header is a number: leading zeros count, too many digits clamp, anything else is 400") {
  server_thread pricing;
  bookstore::options o = options_for(pricing.url("/status/200"));
  o.max_deadline = 1000ms;
  o.reserve = 10ms;
  bookstore_runner store{o};
  const auto port = port_of(store->base_url());
  // 5 ms however it is written: too little time, 504 without a call.
  for (const char* asked : {"5", "0005", "00000000000000000005", "000000000000000000000000000000000000005"}) {
    CAPTURE(asked);
    CHECK(get(port, "/books/1", {{"x-coretry-deadline-ms", asked}}).status == 504);
  }
  CHECK(get(port, "/books/1", {{"x-coretry-deadline-ms", "0000000000000000000000000"}}).status == 504);
  CHECK(pricing->log().empty());
  for (const char* bad : {"+5", "5ms", "0x10", "5 5", "five", "-0", "5.", "\xef\xbc\x95"}) {
    CAPTURE(bad);
    CHECK(get(port, "/books/1", {{"x-coretry-deadline-ms", bad}}).status == 400);
  }
  CHECK(pricing->log().empty());
  // More digits than any number: the maximum, so the call is made.
  CHECK(get(port, "/books/1", {{"x-coretry-deadline-ms", "99999999999999999999999999"}}).status == 200);
  CHECK(pricing->log().size() == 1);
  CHECK(bookstore::parse_whole_number("00000000000000000005") == 5);
  CHECK(bookstore::parse_whole_number("9223372036854775807") == INT64_MAX);
  CHECK(bookstore::parse_whole_number("9223372036854775808") == INT64_MAX);
  CHECK(bookstore::parse_whole_number("") == std::nullopt);
}

TEST_CASE("a book id that path normalisation would change is 404 and never forwarded") {
  server_thread pricing;
  bookstore_runner store{options_for(pricing.url("/echo?book={id}"))};
  const auto port = port_of(store->base_url());
  for (const char* target : {"/books/.", "/books/..", "/books/%2e", "/books/%2E%2e", "/books/.%2e", "/books/%2F",
                             "/books/a%2Fb", "/books/a%2fb", "/books/..%2F..", "/books/../books/1", "/books/./1",
                             "/books/%2e%2e?x=1", "/books/..?x=1"}) {
    CAPTURE(target);
    CHECK(get(port, target).status == 404);
  }
  CHECK(pricing->log().empty());
  // Dots inside an id are no dot segment: forwarded.
  CHECK(get(port, "/books/v1.2").status == 200);
  CHECK(get(port, "/books/...").status == 200);
  REQUIRE(pricing->log().size() == 2);
  CHECK(pricing->log()[0].target == "/echo?book=v1.2");
}

TEST_CASE("a failed call's status and Retry-After come from its stop reason and the gate") {
  using coretry::stop_reason;
  const auto answer = [](stop_reason reason, bool timed_out = false, bool gate_open = true,
                         coretry::duration probe = 100ms) {
    return bookstore::answer_for(reason, timed_out, gate_open, probe);
  };
  CHECK(answer(stop_reason::rejected).status == 502);
  CHECK(answer(stop_reason::deadline_exhausted).status == 504);
  CHECK(answer(stop_reason::attempts_exhausted, true).status == 504); // its last attempt timed out
  CHECK(answer(stop_reason::attempts_exhausted).status == 503);
  CHECK(answer(stop_reason::budget_exhausted).status == 503);
  CHECK(answer(stop_reason::cancelled).status == 503);
  CHECK(answer(stop_reason::dependency_unhealthy).status == 503);
  CHECK(answer(stop_reason::dependency_unhealthy, true).status == 503); // the gate, not the time, ended it
  // Retry-After only for a stop by a gate that is not open: the probe
  // interval rounded up to whole seconds, at least 1.
  CHECK_FALSE(answer(stop_reason::dependency_unhealthy).retry_after);
  CHECK(answer(stop_reason::dependency_unhealthy, false, false).retry_after == 1s);
  CHECK(answer(stop_reason::dependency_unhealthy, false, false, 1ns).retry_after == 1s);
  CHECK(answer(stop_reason::dependency_unhealthy, false, false, 1000ms).retry_after == 1s);
  CHECK(answer(stop_reason::dependency_unhealthy, false, false, 1001ms).retry_after == 2s);
  CHECK(answer(stop_reason::dependency_unhealthy, true, false, 2500ms).retry_after == 3s);
  for (const stop_reason other : {stop_reason::attempts_exhausted, stop_reason::budget_exhausted,
                                  stop_reason::deadline_exhausted, stop_reason::rejected, stop_reason::cancelled}) {
    CAPTURE(coretry::to_string(other));
    CHECK_FALSE(answer(other, false, false).retry_after);
  }
}

TEST_CASE("with pricing down the gate closes, and a call it stops is 503 with Retry-After and counted") {
  // The probe interval, rounded up to whole seconds and at least 1.
  for (const auto& [probe, retry_after] : {std::pair{100ms, "1"}, std::pair{2500ms, "3"}}) {
    CAPTURE(probe.count());
    server_thread pricing;
    bookstore::options o = gated_options(pricing.url("/status/503"));
    o.gate_options.probe_interval = probe;
    bookstore_runner store{o};
    const auto port = port_of(store->base_url());
    constexpr int requests = 40;
    int stopped_by_gate = 0;
    for (int i = 0; i < requests; ++i) {
      CAPTURE(i);
      http_reply res = get(port, "/books/" + std::to_string(i));
      CHECK(res.status == 503);
      if (res.fields["x-coretry-stop"] == "dependency_unhealthy") {
        ++stopped_by_gate;
        CHECK(res.fields["Retry-After"] == retry_after);
      } else {
        CHECK(res.fields.count("Retry-After") == 0);
      }
    }
    // The gate closes after 10 failures (the first attempts of 4 requests
    // with their retries); from then on a retry is denied unless its probe
    // slot is free. At 2.5 s per probe, at most a few are.
    CHECK(stopped_by_gate >= 1);
    if (probe > 1s) CHECK(stopped_by_gate >= requests / 2);
    CHECK(pricing->log().size() <= static_cast<std::size_t>(3 * requests - stopped_by_gate));
    const std::string text = store->metrics();
    CHECK(metric(text, R"(coretry_stops_total{route="/books/{id}",reason="dependency_unhealthy"})") == stopped_by_gate);
    CHECK(metric(text, R"(bookstore_responses_total{route="/books/{id}",code="503"})") == requests);
    CHECK(metric(text, R"(coretry_gate_open{dependency="pricing"})") == 0);
    CHECK(metric(text, R"(coretry_gate_answers_total{dependency="pricing",answer="denied"})") > 0);
  }
}

TEST_CASE("with --gate off there is no gate: no gate series and no call stopped as dependency_unhealthy") {
  server_thread pricing;
  bookstore::options o = gated_options(pricing.url("/status/503"));
  o.gate = false;
  bookstore_runner store{o};
  const auto port = port_of(store->base_url());
  constexpr int requests = 40;
  for (int i = 0; i < requests; ++i) {
    CAPTURE(i);
    http_reply res = get(port, "/books/" + std::to_string(i));
    CHECK(res.status == 503);
    CHECK(res.fields["x-coretry-stop"] != "dependency_unhealthy");
    CHECK(res.fields.count("Retry-After") == 0);
  }
  const std::string text = store->metrics();
  CHECK(text.find("coretry_gate_") == std::string::npos);
  CHECK(metric(text, R"(coretry_stops_total{route="/books/{id}",reason="dependency_unhealthy"})") == 0);
  // Every operation made its three attempts or was stopped by the budget.
  const double exhausted = metric(text, R"(coretry_stops_total{route="/books/{id}",reason="attempts_exhausted"})");
  const double budget = metric(text, R"(coretry_stops_total{route="/books/{id}",reason="budget_exhausted"})");
  CHECK(exhausted + budget == requests);
}

TEST_CASE("with pricing healthy the gate stays open and admits every retry") {
  server_thread pricing;
  // Each book's first call fails and every later one succeeds; each book is
  // asked for twice, so one call in three fails: retries ask the gate, and
  // far too few fail to close it.
  bookstore_runner store{gated_options(pricing.url("/seq/{id}?steps=503,200"))};
  const auto port = port_of(store->base_url());
  constexpr int requests = 40;
  for (int i = 0; i < requests; ++i) {
    CAPTURE(i);
    http_reply res = get(port, "/books/b" + std::to_string(i / 2));
    CHECK(res.status == 200);
    CHECK(res.fields.count("Retry-After") == 0);
  }
  const std::string text = store->metrics();
  CHECK(metric(text, R"(coretry_gate_open{dependency="pricing"})") == 1);
  CHECK(metric(text, R"(coretry_gate_level{dependency="pricing"})") == 0);
  CHECK(pricing->log().size() == requests * 3 / 2);
  CHECK(metric(text, R"(coretry_gate_answers_total{dependency="pricing",answer="admitted"})") == requests / 2);
  CHECK(metric(text, R"(coretry_gate_answers_total{dependency="pricing",answer="probe"})") == 0);
  CHECK(metric(text, R"(coretry_gate_answers_total{dependency="pricing",answer="denied"})") == 0);
  CHECK(metric(text, R"(coretry_gate_answers_total{dependency="pricing",answer="held"})") == 0);
  CHECK(metric(text, R"(coretry_stops_total{route="/books/{id}",reason="dependency_unhealthy"})") == 0);
}

TEST_CASE("hostile clients: an endless chunk extension is refused with bounded memory and counted") {
  bookstore_runner store{options_for("http://127.0.0.1:9/{id}")};
  const auto port = port_of(store->base_url());
  hostile::raw_connection connection{port};
  const hostile::ending end = hostile::send_endless_chunk_extension(connection, 64 * 1024 * 1024, 24 * 1024);
  CAPTURE(end.received.substr(0, 200));
  CHECK(end.refused_cleanly());
  CHECK(end.elapsed < 5s);
  if (end.status() != 0) CHECK(end.status() == 413);
  CHECK(metric_reaches(store, R"(bookstore_refused_requests_total{cause="body_too_large"})", 1));
  // An oversized header: 431, counted.
  hostile::raw_connection big{port};
  big.send("GET /books/1 HTTP/1.1\r\nX-Big: " + std::string(20 * 1024, 'x') + "\r\n\r\n");
  const hostile::ending header = big.wait_for_end(3s);
  CHECK(header.refused_cleanly());
  if (header.status() != 0) CHECK(header.status() == 431);
  CHECK(metric_reaches(store, R"(bookstore_refused_requests_total{cause="header_too_large"})", 1));
}

TEST_CASE("hostile clients: a header that never ends and an idle keep-alive connection are closed in time") {
  bookstore::options o = options_for("http://127.0.0.1:9/{id}");
  o.limits.header_timeout = 400ms;
  o.limits.keep_alive_timeout = 300ms;
  bookstore_runner store{o};
  const auto port = port_of(store->base_url());
  {
    hostile::raw_connection connection{port};
    const auto start = hostile::clock::now();
    connection.send("GET /metrics HTTP/1.1\r\nX-Slow: ");
    bool open = true;
    while (open && hostile::clock::now() - start < 3s) { // one byte every 50 ms
      std::this_thread::sleep_for(50ms);
      open = connection.send("x", 200ms);
    }
    const hostile::ending end = connection.wait_for_end(3s);
    const auto elapsed = hostile::clock::now() - start;
    CHECK(end.closed);
    CHECK(elapsed >= 350ms);
    CHECK(elapsed < 2s);
    CHECK(metric_reaches(store, R"(bookstore_refused_requests_total{cause="header_timeout"})", 1));
  }
  {
    hostile::raw_connection connection{port};
    REQUIRE(connection.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
    REQUIRE(connection.read_response(3s).starts_with("HTTP/1.1 200 "));
    const hostile::ending end = connection.wait_for_end(3s);
    CHECK(end.closed);
    CHECK(end.received.empty());
    CHECK(end.elapsed >= 250ms);
    CHECK(end.elapsed < 2s);
    CHECK(metric_reaches(store, R"(bookstore_refused_requests_total{cause="idle_timeout"})", 1));
  }
}

TEST_CASE("hostile clients: at the connection cap new clients wait without spinning and are served once hogs leave") {
  bookstore::options o = options_for("http://127.0.0.1:9/{id}");
  o.max_clients = 3;
  bookstore_runner store{o};
  hostile::check_waiting_at_cap(port_of(store->base_url()), 3, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
                                [&] { return store->open_connections(); });
}

TEST_CASE("hostile clients: at the cap, idle kept-alive connections are closed oldest first to admit new clients") {
  bookstore::options o = options_for("http://127.0.0.1:9/{id}");
  o.max_clients = 8;
  bookstore_runner store{o};
  hostile::check_idle_flood(
      port_of(store->base_url()), hostile::get_request("/metrics"), [&] { return store->open_connections(); },
      [&] { return static_cast<std::uint64_t>(metric(store->metrics(), "bookstore_idle_closed_total")); });
}

TEST_CASE("hostile clients: a client that never reads its responses is reset within the send timeout") {
  bookstore::options o = options_for("http://127.0.0.1:9/{id}");
  o.limits.send_timeout = 500ms;
  bookstore_runner store{o};
  const auto port = port_of(store->base_url());
  const auto start = hostile::clock::now();
  // Answers from /metrics are several KB each, more than the window.
  const auto reader = hostile::never_reading_client(port, hostile::get_request("/metrics"));
  REQUIRE(eventually([&] { return store->open_connections() == 1; }, 3s));
  CHECK(eventually([&] { return store->open_connections() == 0; }, 3s));
  const auto elapsed = hostile::clock::now() - start;
  CHECK(elapsed >= 400ms);
  CHECK(elapsed < 2s);
  CHECK(metric(store->metrics(), "bookstore_send_timeouts_total") == 1);
}

TEST_CASE("hostile clients: at the cap, with a client waiting, a stalled response is given up before its send timeout") {
  bookstore::options o = options_for("http://127.0.0.1:9/{id}");
  o.max_clients = 1; // a 10 s send timeout
  bookstore_runner store{o};
  const auto port = port_of(store->base_url());
  const std::string request = hostile::get_request("/metrics");
  const auto asked = hostile::clock::now();
  const auto reader = hostile::never_reading_client(port, request);
  REQUIRE(eventually([&] { return store->open_connections() == 1; }, 3s));
  hostile::raw_connection client{port}; // waits in the backlog
  const auto start = hostile::clock::now();
  REQUIRE(client.send(request));
  CHECK(client.read_response(3s).starts_with("HTTP/1.1 200 "));
  // Given up after a second of stall (the reader's), long before 10 s.
  CHECK(hostile::clock::now() - asked >= 900ms);
  CHECK(hostile::clock::now() - start < 3s);
  CHECK(metric(store->metrics(), "bookstore_send_timeouts_total") == 1);
}

TEST_CASE("hostile clients: out of descriptors, the accept loop pauses instead of spinning and serves again") {
  if (!hostile::can_run_out_of_descriptors()) return;
  bookstore_runner store{options_for("http://127.0.0.1:9/{id}")};
  const std::string response = hostile::request_while_out_of_descriptors(port_of(store->base_url()),
                                                                         "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(response.starts_with("HTTP/1.1 200 "));
  CHECK(metric(store->metrics(), "bookstore_accept_errors_total") >= 1);
}

#if CORETRY_BOOKSTORE_TESTS_REDIS

TEST_CASE("two bookstores sharing one Redis stay within one budget's bound together") {
  REDIS_SERVER_OR_SKIP(redis);
  server_thread pricing;
  // Pricing always fails; each bookstore alone could add 20 + 10% retries:
  // two, 2 x (20 + 0.1 x 100) = 60. Sharing, the pair has one bucket:
  // 20 + 0.1 x 200 = 40.
  std::vector<std::unique_ptr<bookstore_runner>> stores;
  redis_tests::problems told;
  for (int i = 0; i < 2; ++i) {
    bookstore::options o = options_for(pricing.url("/status/503"));
    o.on_shared_state_problem = told.callback();
    o.gate = false;
    o.shared_state = redis->url();
    o.shared_state_prefix = "pair";
    // A loaded machine (the sanitizer builds) may take longer than 50 ms to
    // finish an exchange; one that times out falls back to local budgets,
    // whose bound is not the one checked here.
    o.reconcile_period = 1000ms;
    stores.push_back(std::make_unique<bookstore_runner>(o, 2));
  }
  for (auto& store : stores)
    REQUIRE(eventually([&] { return metric((*store)->metrics(), "coretry_shared_state_up") == 1; }));
  constexpr int per_store = 100;
  std::vector<std::thread> callers;
  std::atomic<int> answered{0};
  for (int t = 0; t < 8; ++t)
    callers.emplace_back([&, t] {
      const auto port = port_of(stores[static_cast<std::size_t>(t % 2)]->operator->()->base_url());
      for (int i = t / 2; i < per_store; i += 4)
        if (get(port, "/books/" + std::to_string(i)).status == 503) ++answered;
    });
  for (auto& c : callers) c.join();
  CHECK(answered == 2 * per_store);
  const auto calls = pricing->log().size();
  MESSAGE("pricing calls: " << calls);
  CHECK(calls >= 2 * per_store);
  CHECK(calls <= 2 * per_store + 40);
  for (const auto& p : told.all()) MESSAGE("shared state problem: " << p);
  for (auto& store : stores) CHECK(metric((*store)->metrics(), "coretry_shared_state_fallbacks_total") == 0);
}

TEST_CASE("the program with a refused Redis password says so once, never shows it, and serves with local state") {
  REDIS_SERVER_OR_SKIP(redis, redis_tests::redis_server::options{"the-right-one"});
  server_thread pricing;
  const std::string wrong = "not-the-password-42";
  listening_program store{bookstore_program,
                          {"--listen", "127.0.0.1:0", "--pricing", pricing.url("/status/200"), "--threads", "1",
                           "--shared-state", "redis://:" + wrong + "@127.0.0.1:" + std::to_string(redis->port())}};
  const auto port = store.port();
  CHECK(get(port, "/books/1").status == 200);
  // A second or two of reconnecting, each refused the same way.
  std::this_thread::sleep_for(1500ms);
  const auto metrics = get(port, "/metrics").body;
  CHECK(metric(metrics, "coretry_shared_state_up") == 0);
  CHECK(metric(metrics, "coretry_shared_state_fallbacks_total") == 1);
  CHECK(get(port, "/books/2").status == 200);
  const auto result = store.stop(SIGTERM, 20s);
  CHECK(result.status == 0);
  CAPTURE(result.err);
  int told = 0;
  for (const auto& l : result.err_lines())
    if (l.find("shared state:") != std::string::npos) ++told;
  CHECK(told == 1);
  CHECK(result.err.find("AUTH") != std::string::npos);
  CHECK(result.err.find(wrong) == std::string::npos);
  CHECK(result.err.find("the-right-one") == std::string::npos);
}

TEST_CASE("the program takes the Redis password from CORETRY_REDIS_PASSWORD and shares") {
  REDIS_SERVER_OR_SKIP(redis, redis_tests::redis_server::options{"from-the-environment"});
  server_thread pricing;
  ::setenv("CORETRY_REDIS_PASSWORD", "from-the-environment", 1);
  listening_program store{bookstore_program,
                          {"--listen", "127.0.0.1:0", "--pricing", pricing.url("/status/200"), "--threads", "1",
                           "--shared-state", "redis://127.0.0.1:" + std::to_string(redis->port()),
                           "--shared-state-prefix", "env"}};
  ::unsetenv("CORETRY_REDIS_PASSWORD");
  const auto port = store.port();
  CHECK(eventually([&] { return metric(get(port, "/metrics").body, "coretry_shared_state_up") == 1; }));
  CHECK(get(port, "/books/1").status == 200);
  const auto keys = redis->command({"KEYS", "env:{pricing}:*"});
  REQUIRE(keys);
  CHECK(keys->elements.size() >= 1);
  const auto result = store.stop(SIGTERM, 20s);
  CHECK(result.status == 0);
  CHECK(result.err.find("from-the-environment") == std::string::npos);
}

// Every process's command line this test may read (/proc/PID/cmdline).
std::vector<std::string> command_lines() {
  std::vector<std::string> lines;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    lines.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return lines;
}

TEST_CASE("bookstores share through rediss:// as an ACL user from the environment, and the password shows nowhere") {
  // A password no other process can have by chance.
  std::random_device entropy;
  const std::string password = "acl-" + std::to_string(entropy()) + "-" + std::to_string(entropy());
  REDIS_SERVER_OR_SKIP(redis, redis_tests::redis_server::options{
                                  .tls = true, .acl_user = "bookstore", .acl_password = password});
  server_thread pricing;
  ::setenv("CORETRY_REDIS_USERNAME", "bookstore", 1);
  ::setenv("CORETRY_REDIS_PASSWORD", password.c_str(), 1);
  std::vector<std::unique_ptr<listening_program>> stores;
  for (int i = 0; i < 2; ++i)
    stores.push_back(std::make_unique<listening_program>(
        bookstore_program,
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--pricing", pricing.url("/status/503"), "--threads", "1",
                                 "--gate", "off", "--shared-state",
                                 "rediss://127.0.0.1:" + std::to_string(redis->tls_port()), "--shared-state-cacert",
                                 redis->ca_file(), "--shared-state-prefix", "tls", "--reconcile-period", "500"}));
  ::unsetenv("CORETRY_REDIS_USERNAME");
  ::unsetenv("CORETRY_REDIS_PASSWORD");
  for (auto& store : stores)
    REQUIRE(eventually([&] { return metric(get(store->port(), "/metrics").body, "coretry_shared_state_up") == 1; }));
  const auto clients = redis->command({"CLIENT", "LIST"});
  REQUIRE(clients);
  CHECK(clients->text.find("user=bookstore") != std::string::npos);

  // Pricing always fails: one bucket for the pair, 20 + 0.1 x 200 retries.
  constexpr int per_store = 100;
  std::atomic<int> answered{0};
  const auto ask = [&](int requests) {
    std::vector<std::thread> callers;
    for (int t = 0; t < 4; ++t)
      callers.emplace_back([&, t] {
        const auto port = stores[static_cast<std::size_t>(t % 2)]->port();
        for (int i = t / 2; i < requests; i += 2)
          if (get(port, "/books/" + std::to_string(i)).status == 503) ++answered;
      });
    for (auto& c : callers) c.join();
  };
  ask(per_store);
  CHECK(answered == 2 * per_store);
  const auto calls = pricing->log().size();
  MESSAGE("pricing calls: " << calls);
  CHECK(calls <= 2 * per_store + 40);

  for (const auto& line : command_lines()) CHECK(line.find(password) == std::string::npos);
  for (auto& store : stores) {
    CHECK(metric(get(store->port(), "/metrics").body, "coretry_shared_state_fallbacks_total") == 0);
    CHECK(get(store->port(), "/metrics").body.find(password) == std::string::npos);
  }

  // Redis killed: every request is still answered, with local budgets.
  redis->kill();
  answered = 0;
  ask(20);
  CHECK(answered == 2 * 20);
  for (auto& store : stores) {
    const auto result = store->stop(SIGTERM, 20s);
    CHECK(result.status == 0);
    CHECK(result.out.find(password) == std::string::npos);
    CHECK(result.err.find(password) == std::string::npos);
    CHECK(result.err.find("shared state:") != std::string::npos); // Redis's loss was told
  }
}

#endif

} // TEST_SUITE
