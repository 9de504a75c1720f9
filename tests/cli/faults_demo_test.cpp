// `coretry faults` (plain and TLS, used by `coretry fetch`), `coretry demo`,
// and the help pages.

#include "process.hpp"

#include <boost/json.hpp>

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <csignal>

#include <poll.h>

using namespace cli_tests;

namespace {

/// `coretry faults` running as its own process.
listening_program start_faults(std::vector<std::string> args) {
  args.insert(args.begin(), "faults");
  // TLS first generates its keys: allow for a slow machine.
  return listening_program(program, std::move(args), 15s);
}

} // namespace

TEST_CASE("cli: faults: announces its URL, serves scripts and its log, stops on SIGINT with 0") {
  auto server = start_faults({"--listen", "127.0.0.1:0"});
  CHECK(server.base_url().starts_with("http://127.0.0.1:"));

  auto r = run({"fetch", server.base_url() + "/seq/s?steps=502,200;body=served"});
  CHECK(r.status == 0);
  CHECK(r.out == "served");

  r = run({"fetch", server.base_url() + "/_log"});
  REQUIRE(r.status == 0);
  const auto log = boost::json::parse(r.out).at("requests").as_array();
  CHECK(log.size() == 2);

  const auto stopped = server.stop(SIGINT, 5s);
  CHECK_FALSE(stopped.timed_out);
  CHECK(stopped.status == 0);
}

TEST_CASE("cli: faults --header-timeout closes a connection that sends no header in time") {
  auto server = start_faults({"--listen", "127.0.0.1:0", "--header-timeout", "0.3", "--keep-alive-timeout", "5",
                              "--max-clients", "4"});
  const auto port = server.port();
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket{io};
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  const auto start = std::chrono::steady_clock::now();
  pollfd ready{socket.native_handle(), POLLIN, 0};
  REQUIRE_MESSAGE(::poll(&ready, 1, 3000) == 1, "the connection was still open after 3 s");
  const auto elapsed = std::chrono::steady_clock::now() - start;
  char byte;
  boost::system::error_code error;
  socket.read_some(boost::asio::buffer(&byte, 1), error);
  CHECK(error == boost::asio::error::eof); // closed by the server, nothing sent
  CHECK(elapsed >= 250ms);
  CHECK(elapsed < 2s);
  CHECK(server.stop(SIGTERM, 5s).status == 0);
}

TEST_CASE("cli: faults --tls: fetch trusts the generated CA with --cacert, and only then") {
  temporary_directory directory;
  const std::string ca = directory.file("ca.pem");
  auto server = start_faults({"--tls", "--ca-out", ca, "--listen", "127.0.0.1:0"});
  CHECK(server.base_url().starts_with("https://127.0.0.1:"));

  auto r = run({"fetch", "--cacert", ca, server.base_url() + "/seq/tls?steps=503,200;body=secure"});
  CHECK(r.status == 0);
  CHECK(r.out == "secure");

  r = run({"fetch", "--json", server.base_url() + "/status/200"});
  CHECK(r.status == 10); // certificate verification fails: permanent
  CHECK(std::string{r.json().at("category").as_string()} == "tls_verification");

  const auto stopped = server.stop(SIGTERM, 5s);
  CHECK(stopped.status == 0);
}

TEST_CASE("cli: demo: every case behaves as the seeds say, in under 10 seconds") {
  const auto r = run({"demo"}, 30s);
  INFO("stdout: " << r.out);
  INFO("stderr: " << r.err);
  CHECK(r.status == 0);
  CHECK(r.took < 10s);
  CHECK(r.out.find("Every case behaved as the seeds say.") != std::string::npos);
  for (const char* row : {"No API key", "Misspelled param (emial=)", "Misspelled API name",
                          "Scraper target blocks bots", "Client timeout on a POST", "Rate limited",
                          "Upstream hiccup", "asked for 40 characters, got 12", "server_delay_too_long"})
    CHECK_MESSAGE(r.out.find(row) != std::string::npos, row);
}

TEST_CASE("cli: help pages: description, grouped options, exit statuses, examples") {
  auto r = run({"--help"});
  CHECK(r.status == 0);
  for (const char* part : {"Usage: coretry", "fetch", "faults", "demo", "EXIT STATUS", "EXAMPLES"})
    CHECK_MESSAGE(r.out.find(part) != std::string::npos, part);

  r = run({"fetch", "--help"});
  CHECK(r.status == 0);
  for (const char* part : {"Request:", "Retry policy:", "Timeouts:", "--max-attempts", "--idempotency-key",
                           "EXIT STATUS", "16   outcome_unknown", "EXAMPLES", "RETRY POLICY"})
    CHECK_MESSAGE(r.out.find(part) != std::string::npos, part);

  r = run({"--version"});
  CHECK(r.status == 0);
  CHECK(r.out.starts_with("coretry "));
}

TEST_CASE("cli: faults --workers --service-ms --queue-limit set the capacity route, /_capacity reports them") {
  auto server = start_faults({"--listen", "127.0.0.1:0", "--workers", "3", "--service-ms", "5", "--queue-limit", "7"});
  auto r = run({"fetch", server.base_url() + "/capacity/book-1"});
  CHECK(r.status == 0);
  r = run({"fetch", server.base_url() + "/_capacity?workers=2"});
  REQUIRE(r.status == 0);
  const auto counters = boost::json::parse(r.out).as_object();
  CHECK(counters.at("workers").to_number<int>() == 2);
  CHECK(counters.at("service_ms").to_number<int>() == 5);
  CHECK(counters.at("queue_limit").to_number<int>() == 7);
  CHECK(counters.at("served").to_number<int>() == 1);
  const auto stopped = server.stop(SIGTERM, 5s);
  CHECK(stopped.status == 0);
}
