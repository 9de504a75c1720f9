// The capacity route (/capacity/...): a FIFO queue in front of a fixed,
// changeable number of workers, each request holding one for the service
// time; abandoned requests are still worked off and counted as wasted.
// Real loopback sockets with short service times.

#include "test_support.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>

#include <doctest/doctest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace fault_tests;
namespace json = boost::json;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

coretry::faults::fault_server_options capacity_server(std::size_t workers, milliseconds service,
                                                      std::size_t queue_limit = 100000) {
  coretry::faults::fault_server_options options;
  options.capacity.workers = workers;
  options.capacity.service_time = service;
  options.capacity.queue_limit = queue_limit;
  return options;
}

json::object capacity_counters(test_client& control, std::string_view target = "/_capacity") {
  const reply answer = control.get(target);
  REQUIRE_FALSE(answer.error);
  REQUIRE(answer.response.result_int() == 200);
  return json::parse(answer.response.body()).as_object();
}

std::int64_t capacity_count(const json::object& counters, std::string_view name) {
  return counters.at(name).to_number<std::int64_t>();
}

// Polls /_capacity until `name` is `value`, closely (a loopback exchange
// takes well under a millisecond), so that requests sent one after the other
// reach the queue faster than the workers free up.
bool capacity_reaches(test_client& control, std::string_view name, std::int64_t value) {
  const auto until = steady_clock::now() + milliseconds{3000};
  while (capacity_count(capacity_counters(control), name) != value) {
    if (steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds{200});
  }
  return true;
}

std::string capacity_field(const http_response& response, std::string_view name) {
  const auto found = response.find(name);
  return found == response.end() ? std::string{"(absent)"} : std::string{found->value()};
}

// Sends GET /capacity/NAME on a fresh connection of `client`, without reading.
void capacity_send(test_client& client, const std::string& name) {
  REQUIRE_FALSE(client.connect());
  REQUIRE_FALSE(client.write(make_request(http::verb::get, "/capacity/" + name)));
}

// A raw client that sends one request and then goes away, closing (FIN) or
// resetting (RST) its connection.
class capacity_leaver {
public:
  explicit capacity_leaver(unsigned short port) : socket_(io_) {
    socket_.connect({asio::ip::make_address("127.0.0.1"), port});
    const std::string request = "GET /capacity/leaver HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    asio::write(socket_, asio::buffer(request));
  }
  void leave(bool reset) {
    error_code ignored;
    if (reset) socket_.set_option(asio::socket_base::linger(true, 0), ignored);
    socket_.close(ignored);
  }

private:
  asio::io_context io_;
  asio::ip::tcp::socket socket_;
};

} // namespace

TEST_SUITE("capacity") {

TEST_CASE("capacity: two workers take requests in FIFO order and hold each for the service time") {
  server_thread server{capacity_server(2, milliseconds{30})};
  test_client control{server->port()};
  std::vector<std::unique_ptr<test_client>> clients;
  const auto first_sent = steady_clock::now();
  for (int i = 0; i < 6; ++i) {
    clients.push_back(std::make_unique<test_client>(server->port()));
    capacity_send(*clients.back(), "book-" + std::to_string(i));
    // Admitted before the next is sent: the queue's order is the order sent.
    REQUIRE(capacity_reaches(control, "admitted", i + 1));
  }
  for (int i = 0; i < 6; ++i) {
    CAPTURE(i);
    http_response response;
    REQUIRE_FALSE(clients[i]->read(response));
    CHECK(response.result_int() == 200);
    CHECK(response.body() == R"({"status":200})");
    // First come, first served...
    CHECK(capacity_field(response, "X-Capacity-Start") == std::to_string(i + 1));
    // ...two at a time, 30 ms each: the i-th cannot be done before its pair's turn ends.
    const auto elapsed = steady_clock::now() - first_sent;
    CHECK(elapsed >= milliseconds{30 * (i / 2 + 1)});
    CHECK(elapsed < milliseconds{3000});
  }
  const json::object counters = capacity_counters(control);
  CHECK(capacity_count(counters, "workers") == 2);
  CHECK(capacity_count(counters, "completed") == 6);
  CHECK(capacity_count(counters, "served") == 6);
  CHECK(capacity_count(counters, "wasted") == 0);
  CHECK(capacity_count(counters, "queue_length") == 0);
  CHECK(capacity_count(counters, "busy_workers") == 0);
  // Each request held a worker for at least the service time.
  CHECK(counters.at("busy_ms").to_number<double>() >= 6 * 30);
  CHECK(capacity_count(counters, "queue_high_water") >= 1);
}

TEST_CASE("capacity: a request whose client has gone still takes its turn, and its work is counted as wasted") {
  server_thread server{capacity_server(1, milliseconds{60})};
  test_client control{server->port()};
  test_client first{server->port()};
  test_client after{server->port()};

  bool reset = false;
  SUBCASE("closed while it waits") { reset = false; }
  SUBCASE("reset while it waits") { reset = true; }
  CAPTURE(reset);

  capacity_send(first, "first");
  REQUIRE(capacity_reaches(control, "busy_workers", 1));
  capacity_leaver leaver{server->port()};
  REQUIRE(capacity_reaches(control, "queue_length", 1));
  leaver.leave(reset);
  // Seen gone while it waits (the server keeps watching its connection)...
  REQUIRE(capacity_reaches(control, "abandoned_pending", 1));
  // ...yet it stays in the queue, ahead of a later request.
  capacity_send(after, "after");
  REQUIRE(capacity_reaches(control, "admitted", 3));

  http_response response;
  REQUIRE_FALSE(first.read(response));
  CHECK(response.result_int() == 200);
  REQUIRE_FALSE(after.read(response));
  CHECK(response.result_int() == 200);
  // The abandoned request had the worker second: the later one waited out its
  // full service time.
  CHECK(capacity_field(response, "X-Capacity-Start") == "3");
  CHECK(std::stod(capacity_field(response, "X-Capacity-Queued-Ms")) >= 59.0);

  const json::object counters = capacity_counters(control);
  CHECK(capacity_count(counters, "completed") == 3);
  CHECK(capacity_count(counters, "served") == 2);
  CHECK(capacity_count(counters, "wasted") == 1);
  CHECK(capacity_count(counters, "abandoned_pending") == 0);
  CHECK(counters.at("busy_ms").to_number<double>() >= 3 * 60);
}

TEST_CASE("capacity: a client that goes while at its worker leaves that worker busy to the end, wasted") {
  server_thread server{capacity_server(1, milliseconds{80})};
  test_client control{server->port()};
  capacity_leaver leaver{server->port()};
  REQUIRE(capacity_reaches(control, "busy_workers", 1));
  leaver.leave(false);
  REQUIRE(capacity_reaches(control, "abandoned_pending", 1));
  CHECK(capacity_count(capacity_counters(control), "busy_workers") == 1);
  REQUIRE(capacity_reaches(control, "completed", 1));
  const json::object counters = capacity_counters(control);
  CHECK(capacity_count(counters, "wasted") == 1);
  CHECK(capacity_count(counters, "served") == 0);
  CHECK(counters.at("busy_ms").to_number<double>() >= 80);
}

TEST_CASE("capacity: the number of workers changes at run time") {
  server_thread server{capacity_server(1, milliseconds{100})};
  test_client control{server->port()};
  std::vector<std::unique_ptr<test_client>> clients;
  const auto send = [&](int count) {
    for (int i = 0; i < count; ++i) {
      clients.push_back(std::make_unique<test_client>(server->port()));
      capacity_send(*clients.back(), "book");
    }
  };
  const auto read_all = [&] {
    for (auto& client : clients) {
      http_response response;
      REQUIRE_FALSE(client->read(response));
      CHECK(response.result_int() == 200);
    }
    clients.clear();
  };

  // Growing: the waiting requests go to the new workers at once.
  send(4);
  REQUIRE(capacity_reaches(control, "admitted", 4));
  json::object counters = capacity_counters(control, "/_capacity?workers=4");
  CHECK(capacity_count(counters, "workers") == 4);
  CHECK(capacity_count(counters, "queue_length") == 0);
  CHECK(capacity_count(counters, "busy_workers") + capacity_count(counters, "completed") == 4);
  read_all();

  // Shrinking: running work finishes; then one at a time.
  send(4);
  REQUIRE(capacity_reaches(control, "admitted", 8));
  const auto shrunk = steady_clock::now();
  counters = capacity_counters(control, "/_capacity?workers=1");
  CHECK(capacity_count(counters, "workers") == 1);
  send(3);
  REQUIRE(capacity_reaches(control, "admitted", 11));
  read_all();
  // The three sent after the change had one worker: 3 x 100 ms at least.
  CHECK(steady_clock::now() - shrunk >= milliseconds{300});
  counters = capacity_counters(control);
  CHECK(capacity_count(counters, "completed") == 11);
  CHECK(capacity_count(counters, "served") == 11);
}

TEST_CASE("capacity: a full queue answers 503 at once") {
  server_thread server{capacity_server(1, milliseconds{200}, 1)};
  test_client control{server->port()};
  test_client running{server->port()};
  test_client waiting{server->port()};
  test_client refused{server->port()};
  capacity_send(running, "a");
  REQUIRE(capacity_reaches(control, "busy_workers", 1));
  capacity_send(waiting, "b");
  REQUIRE(capacity_reaches(control, "queue_length", 1));
  const reply answer = refused.get("/capacity/c");
  REQUIRE_FALSE(answer.error);
  CHECK(answer.response.result_int() == 503);
  CHECK(answer.response.body().find("queue full") != std::string::npos);
  http_response response;
  REQUIRE_FALSE(running.read(response));
  CHECK(response.result_int() == 200);
  REQUIRE_FALSE(waiting.read(response));
  CHECK(response.result_int() == 200);
  const json::object counters = capacity_counters(control);
  CHECK(capacity_count(counters, "rejected") == 1);
  CHECK(capacity_count(counters, "served") == 2);
  CHECK(capacity_count(counters, "queue_high_water") == 1);
}

TEST_CASE("capacity: stopping the server ends queued and running requests and closes their connections") {
  server_thread server{capacity_server(1, milliseconds{5000})};
  test_client control{server->port()};
  std::vector<std::unique_ptr<test_client>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<test_client>(server->port()));
    capacity_send(*clients.back(), "book");
  }
  REQUIRE(capacity_reaches(control, "admitted", 3));
  control.close();
  // Well before the first request's 5 s are over.
  const auto asked = steady_clock::now();
  CHECK(server.stop_and_wait(milliseconds{2000}));
  CHECK(steady_clock::now() - asked < milliseconds{2000});
  CHECK(server->open_connections() == 0);
  for (auto& client : clients) {
    http_response response;
    CHECK(client->read(response)); // closed without an answer
  }
}

TEST_CASE("capacity: bad options and control requests are refused, naming the problem") {
  asio::io_context io;
  const auto refusal = [&](coretry::faults::fault_server_options options) -> std::string {
    try {
      coretry::faults::fault_server server{io, std::move(options)};
    } catch (const std::invalid_argument& error) {
      return error.what();
    }
    return "(accepted)";
  };
  CHECK(refusal(capacity_server(0, milliseconds{25})).find("workers") != std::string::npos);
  CHECK(refusal(capacity_server(10001, milliseconds{25})).find("workers") != std::string::npos);
  CHECK(refusal(capacity_server(8, milliseconds{60001})).find("service time") != std::string::npos);
  CHECK(refusal(capacity_server(8, milliseconds{-1})).find("service time") != std::string::npos);
  CHECK(refusal(capacity_server(8, milliseconds{25}, 1000001)).find("queue limit") != std::string::npos);

  server_thread server{capacity_server(3, milliseconds{10})};
  test_client control{server->port()};
  for (const char* query : {"workers=0", "workers=10001", "workers=four", "workers=", "workers=2x", "speed=2"}) {
    CAPTURE(query);
    const reply answer = control.get(std::string{"/_capacity?"} + query);
    REQUIRE_FALSE(answer.error);
    CHECK(answer.response.result_int() == 400);
    CHECK(answer.response.body().find("workers") != std::string::npos);
  }
  CHECK(capacity_count(capacity_counters(control), "workers") == 3);
}

} // TEST_SUITE
