// `coretry fetch` and redirects: -L, --max-redirs, --location-trusted, a 3xx
// shown as curl shows it without -L, and a chain of slow redirects inside
// --max-time. Servers of the tests' own on loopback count what they saw.

#include "process.hpp"
#include "raw_server.hpp"

#include <boost/json.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>

using namespace cli_tests;

namespace {

std::string text(const boost::json::value& value) { return std::string{value.as_string()}; }

std::string answer(unsigned status, const std::string& location, const std::string& body) {
  std::string r = "HTTP/1.1 " + std::to_string(status) + " X\r\nConnection: close\r\nContent-Length: " +
                  std::to_string(body.size()) + "\r\n";
  if (!location.empty()) r += "Location: " + location + "\r\n";
  return r + "\r\n" + body;
}

/// Request 1 is redirected to /next with `status`; the rest get 200 "final".
raw_server redirect_once(unsigned status) {
  return raw_server([status](unsigned n, int fd) {
    raw_server::send_all(fd, n == 1 ? answer(status, "/next", "moved") : answer(200, {}, "final"));
  });
}

} // namespace

TEST_CASE("cli: without -L a redirect is the answer: its body on stdout, exit 19, the Location named") {
  auto server = redirect_once(301);
  const auto r = run({"fetch", server.url("/old")});
  CHECK(r.status == 19);
  CHECK(r.out == "moved");
  REQUIRE(r.err_lines().size() == 1);
  CHECK(r.err_lines()[0].find("301") != std::string::npos);
  CHECK(r.err_lines()[0].find("/next") != std::string::npos);
  CHECK(r.err_lines()[0].find("-L") != std::string::npos);
  CHECK(server.requests() == 1);
}

TEST_CASE("cli: -L follows a redirect, and --json and -v show each hop") {
  auto server = redirect_once(302);
  const auto r = run({"fetch", "-L", server.url("/old")});
  CHECK(r.status == 0);
  CHECK(r.out == "final");
  CHECK(server.requests() == 2);

  auto again = redirect_once(307);
  const auto j = run({"fetch", "-L", "--json", again.url("/old")});
  INFO(j.out);
  CHECK(j.status == 0);
  const auto json = j.json();
  CHECK(text(json.at("stop_reason")) == "succeeded");
  CHECK(json.at("attempts").as_int64() == 2);
  const auto& hops = json.at("redirects").as_array();
  REQUIRE(hops.size() == 1);
  CHECK(hops[0].at("status").as_int64() == 307);
  CHECK(text(hops[0].at("location")) == "/next");
  CHECK(text(hops[0].at("url")) == again.url("/old"));
  CHECK(text(hops[0].at("target")) == again.url("/next"));
  CHECK(text(hops[0].at("address")).starts_with("127.0.0.1:"));
  CHECK(json.at("redirect_error").is_null());

  auto verbose = redirect_once(308);
  const auto v = run({"fetch", "-L", "-v", verbose.url("/old")});
  CHECK(v.status == 0);
  CHECK(v.err.find("* redirect: GET " + verbose.url("/old") + " answered 308") != std::string::npos);
}

TEST_CASE("cli: -L --max-redirs N stops a loop as rejected (exit 10), naming too many redirects") {
  raw_server loop([](unsigned, int fd) { raw_server::send_all(fd, answer(302, "/loop", "")); });
  const auto r = run({"fetch", "-L", "--max-redirs", "2", "--json", loop.url("/loop")});
  CHECK(r.status == 10);
  const auto json = r.json();
  CHECK(text(json.at("stop_reason")) == "rejected");
  CHECK(json.at("redirects").as_array().size() == 2);
  CHECK(text(json.at("redirect_error")).find("too many redirects") != std::string::npos);
  CHECK(text(json.at("category")) == "too_many_redirects");
  REQUIRE(r.err_lines().size() == 1);
  CHECK(r.err_lines()[0].find("too many redirects") != std::string::npos);
  CHECK(loop.requests() == 3);
}

TEST_CASE("cli: --max-redirs needs -L, --location-trusted implies it, and a bad count is a usage error") {
  auto server = redirect_once(302);
  const auto alone = run({"fetch", "--max-redirs", "3", server.url("/old")});
  CHECK(alone.status == 2);
  CHECK(alone.err.find("--max-redirs needs -L") != std::string::npos);
  const auto bad = run({"fetch", "-L", "--max-redirs", "1001", server.url("/old")});
  CHECK(bad.status == 2);
  CHECK(bad.err.find("--max-redirs") != std::string::npos);
  CHECK(server.requests() == 0);
  const auto trusted = run({"fetch", "--location-trusted", server.url("/old")});
  CHECK(trusted.status == 0);
  CHECK(trusted.out == "final");
}

TEST_CASE("cli: a chain of slow redirects ends within --max-time 1") {
  // Every answer takes 300 ms and redirects again.
  raw_server slow([](unsigned, int fd) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    raw_server::send_all(fd, answer(307, "/slow", ""));
  });
  const auto started = std::chrono::steady_clock::now();
  const auto r = run({"fetch", "-L", "--json", "--max-time", "1", slow.url("/slow")});
  const auto took = std::chrono::steady_clock::now() - started;
  INFO(r.out);
  INFO(r.err);
  const auto json = r.json();
  CHECK(text(json.at("stop_reason")) == "deadline_exhausted");
  CHECK(json.at("elapsed_ms").as_int64() <= 1050);
  CHECK(json.at("redirects").as_array().size() >= 2);
#ifdef NDEBUG
  // In an optimised build the whole program, start and exit included.
  CHECK(took < std::chrono::milliseconds(1050));
#else
  CHECK(took < std::chrono::milliseconds(2000));
#endif
}
