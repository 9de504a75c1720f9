#include "test_support.hpp"

#include <coretry/http/retry_after.hpp>

#include <boost/json.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace fault_tests;
namespace json = boost::json;
using std::chrono::duration_cast;
using std::chrono::milliseconds;
using std::chrono::system_clock;

namespace {

std::string field(const http_response& response, std::string_view name) {
  const auto found = response.find(name);
  return found == response.end() ? std::string{"(absent)"} : std::string{found->value()};
}

std::vector<std::string> fields(const http_response& response, std::string_view name) {
  std::vector<std::string> values;
  for (auto [it, end] = response.equal_range(name); it != end; ++it) values.emplace_back(it->value());
  return values;
}

// A failure to be told apart from a response: the peer closed or aborted.
bool is_connection_lost(const error_code& error) {
  return error == http::error::end_of_stream || error == asio::error::eof || error == asio::error::connection_reset;
}

json::array logged_requests(test_client& client) {
  const reply log = client.get("/_log");
  REQUIRE_FALSE(log.error);
  REQUIRE(log.response.result_int() == 200);
  CHECK(field(log.response, "Content-Type") == "application/json");
  return json::parse(log.response.body()).at("requests").as_array();
}

} // namespace

TEST_SUITE("fault server") {

TEST_CASE_FIXTURE(server_and_client, "/status answers with the code, Retry-After verbatim and a Date") {
  const reply result = client.get("/status/503?retry-after=1");
  REQUIRE_FALSE(result.error);
  CHECK(result.response.result_int() == 503);
  CHECK(field(result.response, "Retry-After") == "1");
  CHECK(coretry::http::parse_http_date(field(result.response, "Date")).has_value());
  CHECK(result.response.body() == R"({"status":503})");
  CHECK(field(result.response, "Content-Type") == "application/json");

  const reply invalid = client.get("/status/503?retry-after=soon");
  REQUIRE_FALSE(invalid.error);
  CHECK(field(invalid.response, "Retry-After") == "soon");
}

TEST_CASE("Date and a Retry-After date come from one reading of the server's clock") {
  // Each reading of this clock is a second later than the one before, so a
  // server that read it twice would put Date a second after where it should be.
  auto readings = std::make_shared<std::atomic<int>>(0);
  coretry::faults::fault_server_options options;
  options.clock = [readings] {
    return system_clock::time_point{std::chrono::seconds{1'700'000'000 + readings->fetch_add(1)}};
  };
  server_thread server{options};
  test_client client{server->port()};
  for (int round = 0; round < 3; ++round) {
    const reply result = client.get("/status/503?retry-after-date=%2B2");
    REQUIRE_FALSE(result.error);
    const auto date = coretry::http::parse_http_date(field(result.response, "Date"));
    const auto retry_at = coretry::http::parse_http_date(field(result.response, "Retry-After"));
    REQUIRE(date.has_value());
    REQUIRE(retry_at.has_value());
    CHECK(*retry_at - *date == std::chrono::seconds{2});
  }
}

TEST_CASE_FIXTURE(server_and_client, "percent=P fails about P% of requests at random and answers 200 to the rest") {
  std::map<unsigned, int> seen;
  for (int i = 0; i < 400; ++i) {
    const reply result = client.get("/status/503?percent=50&delay=0");
    REQUIRE_FALSE(result.error);
    ++seen[result.response.result_int()];
  }
  CHECK(seen.size() == 2);
  // Binomial(400, 0.5): outside [140, 260] with probability below 1e-9.
  CHECK(seen[503] >= 140);
  CHECK(seen[503] <= 260);
  CHECK(seen[200] == 400 - seen[503]);
  // The ends are exact.
  for (int i = 0; i < 20; ++i) {
    CHECK(client.get("/status/503?percent=0").response.result_int() == 200);
    CHECK(client.get("/status/503?percent=100").response.result_int() == 503);
  }
}

TEST_CASE_FIXTURE(server_and_client, "retry-after-date is an IMF-fixdate that many seconds from now") {
  for (const int offset : {5, -5}) {
    CAPTURE(offset);
    const auto before = system_clock::now();
    const reply result = client.get("/status/429?retry-after-date=" + std::string{offset > 0 ? "%2B" : "-"} +
                                    std::to_string(offset > 0 ? offset : -offset));
    REQUIRE_FALSE(result.error);
    CHECK(result.response.result_int() == 429);
    const auto date = coretry::http::parse_http_date(field(result.response, "Retry-After"));
    REQUIRE(date.has_value());
    // Whole seconds on the wire: up to a second early, plus scheduling slack.
    const auto ahead = duration_cast<milliseconds>(*date - before).count();
    CHECK(ahead >= offset * 1000 - 1500);
    CHECK(ahead <= offset * 1000 + 1500);
  }
}

TEST_CASE_FIXTURE(server_and_client, "header and body options shape the response") {
  const reply result = client.get("/status/418?header=X-Test:one&header=X-Test:two&header=Content-Type:text/x-teapot"
                                  "&body=short%20and%20stout");
  REQUIRE_FALSE(result.error);
  CHECK(result.response.result_int() == 418);
  CHECK(fields(result.response, "X-Test") == std::vector<std::string>{"one", "two"});
  CHECK(fields(result.response, "Content-Type") == std::vector<std::string>{"text/x-teapot"});
  CHECK(result.response.body() == "short and stout");
}

TEST_CASE_FIXTURE(server_and_client, "a sequence answers step by step and then repeats its last step") {
  const std::string target = "/seq/x?steps=429;retry-after=1,502,200";
  std::vector<unsigned> statuses;
  for (int i = 0; i < 4; ++i) {
    const reply result = client.get(target);
    REQUIRE_FALSE(result.error);
    statuses.push_back(result.response.result_int());
    if (i == 0) CHECK(field(result.response, "Retry-After") == "1");
    if (i == 1) CHECK(field(result.response, "Retry-After") == "(absent)");
  }
  CHECK(statuses == std::vector<unsigned>{429, 502, 200, 200});

  // Sequences are kept apart by name.
  CHECK(client.get("/seq/y?steps=503,200").response.result_int() == 503);

  // All of it on one kept-alive connection.
  const auto log = server->log();
  REQUIRE(log.size() == 5);
  for (const auto& entry : log) CHECK(entry.connection == log.front().connection);
}

TEST_CASE("sequence steps may be bare keywords") {
  server_thread server;
  const std::string target = "/seq/k?steps=close,reset,200;delay=50";
  test_client client{server->port()};

  const reply closed = client.get(target);
  CHECK(is_connection_lost(closed.error));

  client.close();
  const reply reset = client.get(target);
  CHECK(reset.error == asio::error::connection_reset);

  client.close();
  const reply delayed = client.get(target);
  REQUIRE_FALSE(delayed.error);
  CHECK(delayed.response.result_int() == 200);
  CHECK(delayed.elapsed >= 50ms);
}

TEST_CASE_FIXTURE(server_and_client, "close ends the connection without any response") {
  const reply result = client.get("/status/503?close");
  CAPTURE(result.error.message());
  CHECK(is_connection_lost(result.error));
}

TEST_CASE_FIXTURE(server_and_client, "reset aborts the connection with a TCP RST") {
  const reply result = client.get("/status/200?reset");
  CAPTURE(result.error.message());
  CHECK(result.error == asio::error::connection_reset);
}

TEST_CASE_FIXTURE(server_and_client, "delay holds the headers back") {
  const reply result = client.get("/status/504?delay=150");
  REQUIRE_FALSE(result.error);
  CHECK(result.response.result_int() == 504);
  CHECK(result.elapsed >= 150ms);
}

TEST_CASE_FIXTURE(server_and_client, "drip sends its bytes one at a time, then the connection goes on") {
  const reply result = client.get("/status/200?drip=5:20");
  REQUIRE_FALSE(result.error);
  CHECK(field(result.response, "Content-Length") == "5");
  CHECK(field(result.response, "Content-Type") == "text/plain; charset=utf-8");
  CHECK(result.response.body() == "abcde");
  CHECK(result.elapsed >= 100ms);
  CHECK(client.get("/status/201").response.result_int() == 201);
}

TEST_CASE_FIXTURE(server_and_client, "hang-after-headers sends headers, then nothing until the client leaves") {
  REQUIRE_FALSE(client.connect());
  REQUIRE_FALSE(client.write(make_request(http::verb::get, "/status/200?hang-after-headers")));
  http::response_parser<http::string_body> parser;
  REQUIRE_FALSE(client.read_header(parser));
  CHECK(parser.get().result_int() == 200);
  CHECK(parser.content_length().value_or(0) > 0);

  client.timeout = 300ms;
  CHECK(client.read_rest(parser) == beast::error::timeout);
  CHECK(server->open_connections() <= 1);
  client.close();
  CHECK(eventually([&] { return server->open_connections() == 0; }, 3s));
}

TEST_CASE_FIXTURE(server_and_client, "HEAD gets the headers of the scripted response and no body") {
  REQUIRE_FALSE(client.connect());
  REQUIRE_FALSE(client.write(make_request(http::verb::head, "/status/200?body=twelve%20bytes")));
  http::response_parser<http::string_body> parser;
  parser.skip(true);
  REQUIRE_FALSE(client.read_rest(parser));
  CHECK(parser.get().result_int() == 200);
  CHECK(field(parser.get(), "Content-Length") == "12");
  CHECK(parser.get().body().empty());
  CHECK(client.get("/status/202").response.result_int() == 202);
}

TEST_CASE_FIXTURE(server_and_client, "/_log records each request's method, target, Idempotency-Key and body length") {
  http_request post = make_request(http::verb::post, "/status/201", "hello");
  post.set("Idempotency-Key", "key-1");
  REQUIRE_FALSE(client.exchange(post).error);
  REQUIRE_FALSE(client.get("/status/200").error);

  const json::array requests = logged_requests(client);
  REQUIRE(requests.size() == 2); // the log's own request is not logged
  const json::object& first = requests[0].as_object();
  CHECK(first.at("method") == "POST");
  CHECK(first.at("target") == "/status/201");
  CHECK(first.at("idempotency_key") == "key-1");
  CHECK(first.at("body_length") == 5);
  CHECK(first.at("received_ms").is_int64());
  const json::object& second = requests[1].as_object();
  CHECK(second.at("method") == "GET");
  CHECK(second.at("idempotency_key").is_null());
  CHECK(second.at("body_length") == 0);
  CHECK(second.at("received_ms").as_int64() >= first.at("received_ms").as_int64());

  const auto log = server->log();
  REQUIRE(log.size() == 2);
  CHECK(log[0].method == "POST");
  CHECK(log[0].idempotency_key == "key-1");
  CHECK(log[1].idempotency_key == std::nullopt);
  CHECK(log[1].received >= log[0].received);
}

TEST_CASE_FIXTURE(server_and_client, "/_reset forgets sequences and the log") {
  const std::string target = "/seq/r?steps=500,200";
  CHECK(client.get(target).response.result_int() == 500);
  CHECK(client.get(target).response.result_int() == 200);
  REQUIRE_FALSE(client.get("/_reset").error);
  CHECK(server->log().empty());
  CHECK(client.get(target).response.result_int() == 500);

  server->clear();
  CHECK(server->log().empty());
  CHECK(client.get(target).response.result_int() == 500);
}

TEST_CASE("the log keeps the most recent requests up to its limit and counts the rest") {
  coretry::faults::fault_server_options options;
  options.log_limit = 3;
  server_thread server{options};
  test_client client{server->port()};
  for (int code = 201; code <= 205; ++code)
    CHECK(client.get("/status/" + std::to_string(code)).response.result_int() == code);
  const auto log = server->log();
  REQUIRE(log.size() == 3);
  CHECK(log[0].target == "/status/203");
  CHECK(log[2].target == "/status/205");
  CHECK(server->log_dropped() == 2);
  const auto listed = json::parse(client.get("/_log").response.body()).as_object();
  CHECK(listed.at("requests").as_array().size() == 3);
  CHECK(listed.at("dropped") == 2);

  server->clear();
  CHECK(server->log_dropped() == 0);

  options.log_limit = 0; // no log at all
  server_thread silent{options};
  test_client silent_client{silent->port()};
  CHECK(silent_client.get("/status/200").response.result_int() == 200);
  CHECK(silent->log().empty());
  CHECK(silent->log_dropped() == 1);
}

TEST_CASE_FIXTURE(server_and_client, "/echo returns what the client sent") {
  http_request put = make_request(http::verb::put, "/echo?x=1", "payload");
  put.set("X-Custom", "value");
  const reply result = client.exchange(put);
  REQUIRE_FALSE(result.error);
  const json::object echo = json::parse(result.response.body()).as_object();
  CHECK(echo.at("method") == "PUT");
  CHECK(echo.at("target") == "/echo?x=1");
  CHECK(echo.at("body") == "payload");
  bool custom_seen = false;
  for (const json::value& header : echo.at("headers").as_array())
    custom_seen |= header.at("name") == "X-Custom" && header.at("value") == "value";
  CHECK(custom_seen);
}

TEST_CASE_FIXTURE(server_and_client, "bad scripts get a 400 naming the problem, on a connection that goes on") {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"/status/abc", "status code 'abc' is not a number"},
      {"/status/600", "outside 100-599"},
      {"/status/99", "outside 100-599"},
      {"/status/200?drip=5", "drip must be N:MS"},
      {"/status/200?frobnicate", "unknown option 'frobnicate'"},
      {"/seq/s?steps=429;bogus,200", "step 1: unknown option 'bogus'"},
      {"/seq/s?steps=200,wait", "step 2: unknown option 'wait'"},
      {"/seq/s?steps=200,abc;delay=1", "step 2: unknown option 'abc'"},
      {"/seq/s?steps=1000", "step 1: status code '1000' is outside 100-599"},
      {"/seq/s?steps=200;drip=a:b", "drip's byte count"},
      {"/seq/s", "missing 'steps'"},
      {"/seq/?steps=200", "a sequence needs a name"},
      {"/nowhere", "unknown path '/nowhere'"},
  };
  for (const auto& [target, problem] : cases) {
    CAPTURE(target);
    const reply result = client.get(target);
    REQUIRE_FALSE(result.error);
    CHECK(result.response.result_int() == 400);
    CHECK(result.response.body().find(problem) != std::string::npos);
    CHECK(field(result.response, "Content-Type") == "text/plain; charset=utf-8");
  }
  // A bad script costs its sequence no step.
  CHECK(client.get("/seq/s?steps=503,200").response.result_int() == 503);
}

TEST_CASE("malformed or oversized requests are refused and the server goes on") {
  server_thread server;
  const std::string_view malformed[] = {
      "THIS IS NOT HTTP\r\n\r\n",
      "GET /status/200 HTTP/9.9\r\n\r\n",
      "GET /status/200 HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
      "GET /status/200 HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n\r\n",
      "POST /echo HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n",
      "GET /status/200 HTTP/1.1\r\nBad Field: x\r\n\r\n",
      std::string_view{"\0\x01\xff\xfe\r\n\r\n", 8},
  };
  // Refused means answered 4xx, or at least the connection closed, within
  // the client's 2 s: a server that never answers fails.
  const auto refused = [](const error_code& error, const std::string& received,
                          std::initializer_list<std::string_view> statuses) {
    CAPTURE(error.message());
    CHECK(error != beast::error::timeout);
    if (received.empty()) return is_connection_lost(error);
    return std::any_of(statuses.begin(), statuses.end(),
                       [&](std::string_view status) { return received.starts_with(status); });
  };
  for (const std::string_view input : malformed) {
    CAPTURE(input);
    test_client client{server->port()};
    client.timeout = 2s;
    REQUIRE_FALSE(client.connect());
    REQUIRE_FALSE(client.write_raw(input));
    std::string received;
    const error_code error = client.read_raw(received);
    CAPTURE(received);
    CHECK(refused(error, received, {"HTTP/1.1 400 ", "HTTP/1.1 413 "}));
  }
  {
    test_client client{server->port()};
    client.timeout = 2s;
    REQUIRE_FALSE(client.connect());
    const std::string huge_field = "X-Huge: " + std::string(64 * 1024, 'x') + "\r\n";
    // The server may refuse before it has read everything, so writing can fail.
    client.write_raw("GET /status/200 HTTP/1.1\r\nHost: x\r\n" + huge_field + "\r\n");
    std::string received;
    const error_code error = client.read_raw(received);
    CAPTURE(received.substr(0, 200));
    CHECK(refused(error, received, {"HTTP/1.1 431 "}));
  }
  test_client client{server->port()};
  CHECK(client.get("/status/200").response.result_int() == 200);
  CHECK(eventually([&] { return server->open_connections() == 1; }, 3s));
}

TEST_CASE_FIXTURE(server_and_client, "Expect: 100-continue is answered before the body is read") {
  REQUIRE_FALSE(client.connect());
  REQUIRE_FALSE(client.write_raw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  http_response interim;
  REQUIRE_FALSE(client.read(interim));
  CHECK(interim.result_int() == 100);
  REQUIRE_FALSE(client.write_raw("hello"));
  http_response final_response;
  REQUIRE_FALSE(client.read(final_response));
  CHECK(final_response.result_int() == 200);
  CHECK(json::parse(final_response.body()).at("body") == "hello");
}

TEST_CASE("an io_context run by several threads serves concurrent clients") {
  server_thread server{{}, 2};
  constexpr int clients = 4;
  constexpr int requests_each = 25;
  std::vector<std::vector<unsigned>> statuses(clients);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      test_client client{server->port()};
      for (int i = 0; i < requests_each; ++i)
        statuses[c].push_back(client.get("/seq/shared?steps=" + std::to_string(200 + i % 3) + ",500").response.result_int());
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(server->log().size() == clients * requests_each);
  // Only the very first request to the shared sequence got its first step.
  int first_steps = 0;
  for (const auto& seen : statuses)
    for (const unsigned status : seen) first_steps += status != 500;
  CHECK(first_steps == 1);
  CHECK(eventually([&] { return server->open_connections() == 0; }, 3s)); // the clients have left
}

TEST_CASE("stop() closes the acceptor and every connection, cancelling delays") {
  server_thread server;
  test_client idle{server->port()};
  REQUIRE(idle.get("/status/200").response.result_int() == 200); // kept alive, now idle

  test_client hanging{server->port()};
  REQUIRE_FALSE(hanging.connect());
  REQUIRE_FALSE(hanging.write(make_request(http::verb::get, "/status/200?hang-after-headers")));

  test_client waiting{server->port()};
  REQUIRE_FALSE(waiting.connect());
  REQUIRE_FALSE(waiting.write(make_request(http::verb::get, "/status/200?delay=600000")));

  test_client dripping{server->port()};
  REQUIRE_FALSE(dripping.connect());
  REQUIRE_FALSE(dripping.write(make_request(http::verb::get, "/status/200?drip=1000:1000")));

  REQUIRE(eventually([&] { return server->log().size() == 4; }, 3s));
  CHECK(server->open_connections() == 4);

  // The io_context runs dry only if no socket or timer of the server is left.
  REQUIRE(server.stop_and_wait());
  CHECK(server->open_connections() == 0);

  http_response response;
  CHECK(is_connection_lost(idle.read(response)));
  CHECK(is_connection_lost(waiting.read(response)));
  test_client late{server->port()};
  CHECK(late.connect() == asio::error::connection_refused);
}

} // TEST_SUITE
