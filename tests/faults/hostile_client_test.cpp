// The fault server against hostile clients on raw loopback sockets: each
// test asserts the clean end (a 4xx or a closed connection within a stated
// time, bounded memory and CPU, service once the hogs leave).

#include "hostile.hpp"
#include "test_support.hpp"

#include <boost/json.hpp>

#include <doctest/doctest.h>

#include <string>

using namespace fault_tests;
using hostile::raw_connection;
namespace json = boost::json;

namespace {

coretry::faults::fault_server_options quick_timeouts(std::chrono::milliseconds header, std::chrono::milliseconds idle) {
  coretry::faults::fault_server_options options;
  options.limits.header_timeout = header;
  options.limits.keep_alive_timeout = idle;
  return options;
}

json::object log_of(unsigned short port) {
  test_client client{port};
  const reply log = client.get("/_log");
  REQUIRE_FALSE(log.error);
  return json::parse(log.response.body()).as_object();
}

} // namespace

TEST_SUITE("fault server against hostile clients") {

TEST_CASE("an endless chunk extension is refused with a bounded buffer and counted") {
  server_thread server;
  raw_connection connection{server->port()};
  const hostile::ending end = hostile::send_endless_chunk_extension(connection, 64 * 1024 * 1024, 24 * 1024);
  CAPTURE(end.received.substr(0, 200));
  CHECK(end.refused_cleanly());
  CHECK(end.elapsed < 5s);
  if (end.status() != 0) CHECK(end.status() == 413);
  CHECK(eventually([&] { return server->counters().body_too_large == 1; }, 3s));
  CHECK(log_of(server->port()).at("refused").at("body_too_large").to_number<std::uint64_t>() == 1);
}

TEST_CASE("an endless trailer is refused") {
  server_thread server;
  raw_connection connection{server->port()};
  connection.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-Trailer: ");
  const std::string block(64 * 1024, 'b');
  std::size_t sent = 0;
  while (sent < 32 * 1024 * 1024 && connection.send(block, 1s)) sent += block.size();
  CHECK(sent < 32 * 1024 * 1024);
  const hostile::ending end = connection.wait_for_end(3s);
  CHECK(end.refused_cleanly());
}

TEST_CASE("a header that never ends is closed after the header timeout, however it trickles") {
  server_thread server{quick_timeouts(400ms, 5s)};
  raw_connection connection{server->port()};
  const auto start = hostile::clock::now();
  connection.send("GET /status/200 HTTP/1.1\r\nX-Slow: ");
  // One byte every 50 ms: each read succeeds, only the header's deadline ends it.
  bool open = true;
  while (open && hostile::clock::now() - start < 3s) {
    std::this_thread::sleep_for(50ms);
    open = connection.send("x", 200ms);
  }
  const hostile::ending end = connection.wait_for_end(3s);
  const auto elapsed = hostile::clock::now() - start;
  CHECK_FALSE(end.timed_out);
  CHECK(end.closed);
  CHECK(elapsed >= 350ms);
  CHECK(elapsed < 2s);
  CHECK(eventually([&] { return server->counters().header_timeouts == 1; }, 3s));
  CHECK(eventually([&] { return server->open_connections() == 0; }, 3s));
}

TEST_CASE("a connection that never sends a byte is closed after the header timeout") {
  server_thread server{quick_timeouts(300ms, 5s)};
  raw_connection connection{server->port()};
  const hostile::ending end = connection.wait_for_end(3s);
  CHECK(end.closed);
  CHECK(end.received.empty());
  CHECK(end.elapsed >= 250ms);
  CHECK(end.elapsed < 2s);
}

TEST_CASE("an idle keep-alive connection is closed after its timeout") {
  server_thread server{quick_timeouts(5s, 300ms)};
  raw_connection connection{server->port()};
  REQUIRE(connection.send("GET /status/200 HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string response = connection.read_response(3s);
  REQUIRE(response.starts_with("HTTP/1.1 200 "));
  const hostile::ending end = connection.wait_for_end(3s);
  CHECK(end.closed);
  CHECK(end.received.empty());
  CHECK(end.elapsed >= 250ms);
  CHECK(end.elapsed < 2s);
  CHECK(eventually([&] { return server->counters().idle_timeouts == 1; }, 3s));
  CHECK(server->counters().header_timeouts == 0);
}

TEST_CASE("at the connection cap new clients wait in the backlog, without spinning, and are served once hogs leave") {
  coretry::faults::fault_server_options options;
  options.max_clients = 3;
  server_thread server{options};
  hostile::check_waiting_at_cap(server->port(), 3, "GET /status/200 HTTP/1.1\r\nHost: x\r\n\r\n",
                                [&] { return server->open_connections(); });
}

TEST_CASE("at the cap, idle kept-alive connections are closed oldest first to admit new clients") {
  coretry::faults::fault_server_options options;
  options.max_clients = 8;
  server_thread server{options};
  hostile::check_idle_flood(
      server->port(), hostile::get_request("/status/200"), [&] { return server->open_connections(); },
      [&] { return static_cast<std::uint64_t>(server->counters().idle_closed); });
  // The request for the log may itself close one more.
  CHECK(log_of(server->port()).at("refused").at("idle_closed_at_cap").to_number<std::uint64_t>() >= 5);
}

TEST_CASE("a client that never reads its responses is reset within the send timeout and its connection freed") {
  coretry::faults::fault_server_options options;
  options.limits.send_timeout = 500ms;
  server_thread server{options};
  const auto start = hostile::clock::now();
  // Answers of 4 KB each, more than the window.
  const auto reader =
      hostile::never_reading_client(server->port(), hostile::get_request("/status/200?body=" + std::string(4000, 'x')));
  REQUIRE(eventually([&] { return server->open_connections() == 1; }));
  CHECK(eventually([&] { return server->open_connections() == 0; }, 3s));
  const auto elapsed = hostile::clock::now() - start;
  CHECK(elapsed >= 400ms);
  CHECK(elapsed < 2s);
  CHECK(server->counters().send_timeouts == 1);
  CHECK(log_of(server->port()).at("refused").at("send_timeout").to_number<std::uint64_t>() == 1);
}

TEST_CASE("at the cap, with a client waiting, a response stalled for a second is given up before its send timeout") {
  coretry::faults::fault_server_options options;
  options.max_clients = 1;
  server_thread server{options}; // a 10 s send timeout
  const auto asked = hostile::clock::now();
  const auto reader =
      hostile::never_reading_client(server->port(), hostile::get_request("/status/200?body=" + std::string(4000, 'x')));
  REQUIRE(eventually([&] { return server->open_connections() == 1; }));
  raw_connection client{server->port()}; // waits in the backlog
  const auto start = hostile::clock::now();
  REQUIRE(client.send(hostile::get_request("/status/200")));
  CHECK(client.read_response(3s).starts_with("HTTP/1.1 200 "));
  // Given up after a second of stall (the reader's), long before 10 s.
  CHECK(hostile::clock::now() - asked >= 900ms);
  CHECK(hostile::clock::now() - start < 3s);
  CHECK(server->counters().send_timeouts == 1);
}

TEST_CASE("out of descriptors, the accept loop pauses instead of spinning and serves again afterwards") {
  if (!hostile::can_run_out_of_descriptors()) return;
  server_thread server;
  const std::string response =
      hostile::request_while_out_of_descriptors(server->port(), "GET /status/200 HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(response.starts_with("HTTP/1.1 200 "));
  CHECK(server->counters().accept_errors >= 1);
  CHECK(log_of(server->port()).at("refused").at("accept_errors").to_number<std::uint64_t>() >= 1);
}

TEST_CASE("/seq forgets the least recently used names beyond its limit and counts them") {
  coretry::faults::fault_server_options options;
  options.sequence_limit = 3;
  server_thread server{options};
  test_client client{server->port()};
  const auto step = [&](std::string_view name) {
    const reply answer = client.get("/seq/" + std::string{name} + "?steps=500,200");
    REQUIRE_FALSE(answer.error);
    return answer.response.result_int();
  };
  CHECK(step("a") == 500);
  CHECK(step("b") == 500);
  CHECK(step("c") == 500);
  CHECK(step("a") == 200); // a is now the most recently used
  CHECK(step("d") == 500); // b, the least recently used, is forgotten
  CHECK(server->counters().sequences_evicted == 1);
  CHECK(step("a") == 200);
  CHECK(step("c") == 200);
  CHECK(step("b") == 500); // starts again; d is forgotten
  CHECK(step("d") == 500);
  const json::object log = log_of(server->port());
  CHECK(log.at("sequences_evicted").to_number<std::uint64_t>() == 3);
  test_client{server->port()}.get("/_reset");
  CHECK(server->counters().sequences_evicted == 0);
}

TEST_CASE("many distinct /seq names keep the server's memory bounded") {
  coretry::faults::fault_server_options options;
  options.sequence_limit = 100;
  options.log_limit = 100;
  server_thread server{options};
  test_client client{server->port()};
  for (int i = 0; i < 2000; ++i) {
    const reply answer = client.get("/seq/name-" + std::to_string(i) + "?steps=200");
    REQUIRE(answer.response.result_int() == 200);
  }
  CHECK(server->counters().sequences_evicted == 1900);
}

} // TEST_SUITE
