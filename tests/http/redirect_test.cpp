// Following redirects: the rules of one step without sockets, and chains
// against servers of the tests' own on loopback (what each server saw is
// asserted), the fault server for slow and TLS hops.

#include <coretry/budget.hpp>
#include <coretry/gate.hpp>
#include <coretry/http/client.hpp>
#include <coretry/http/redirect.hpp>
#include <coretry/latency_tracker.hpp>
#include <faults/fault_server.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/steady_timer.hpp>

#include "redirect.hpp"

#include <doctest/doctest.h>

#include "blocking_client.hpp"
#include "eventually.hpp"
#include "hostile_server.hpp"
#include "nginx.hpp"
#include "policies.hpp"
#include "server_thread.hpp"
#include "skip.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include <unistd.h>

namespace beast_http = boost::beast::http;
using namespace std::chrono_literals;
using coretry::stop_reason;
using coretry::http::redirect_error;
using coretry::http::redirect_options;
using coretry::http::detail::next_redirect;
using coretry::http::detail::redirect_step;
using coretry::test::loopback_policy;
using coretry::test::server_thread;
using coretry_tests::hostile_server;

namespace {

beast_http::response_header<> answer(unsigned status, std::initializer_list<std::string_view> locations) {
  beast_http::response_header<> h;
  h.result(status);
  for (const auto location : locations) h.insert(beast_http::field::location, location);
  return h;
}

redirect_options follow(unsigned max = 10) {
  redirect_options o;
  o.follow = true;
  o.max_redirects = max;
  return o;
}

redirect_step step(unsigned status, std::string_view location, std::string_view url = "http://a.example/x/y?q#f",
                   beast_http::verb method = beast_http::verb::get, unsigned hops = 0,
                   redirect_options o = follow()) {
  return next_redirect(url, method, answer(status, {location}), hops, o);
}

/// A server answering each request (its head and body) with `reply`'s bytes,
/// on every connection, keeping it open.
struct answering_server {
  using reply = std::function<std::string(const std::string& head, const std::string& body)>;
  explicit answering_server(reply r)
      : server([r = std::move(r)](hostile_server::peer& p) {
          while (p.read_request())
            if (!p.send(r(p.last_head, p.last_body))) return;
        }) {}
  hostile_server server;
  std::string url(const std::string& target) const { return server.url() + target; }
};

std::string response(unsigned status, const std::string& location, const std::string& body = {}) {
  std::string r = "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  if (!location.empty()) r += "Location: " + location + "\r\n";
  return r + "\r\n" + body;
}

std::string request_line(const std::string& head) { return head.substr(0, head.find("\r\n")); }
bool has_header(const std::string& head, const std::string& name) {
  std::string lower;
  for (const char c : head) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string wanted;
  for (const char c : name) wanted += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("\r\n" + wanted + ":") != std::string::npos;
}
std::string header_value(const std::string& head, const std::string& name) {
  const auto at = head.find("\r\n" + name + ": ");
  if (at == std::string::npos) return {};
  const auto start = at + name.size() + 4;
  return head.substr(start, head.find("\r\n", start) - start);
}

coretry::http::request_options following(unsigned max = 10) {
  coretry::http::request_options o;
  o.policy = loopback_policy();
  o.redirects = follow(max);
  return o;
}

/// Counts what the engine asks of a budget.
struct counting_budget final : coretry::retry_budget {
  void record_initial_request() noexcept override { ++initial; }
  bool try_acquire_retry() noexcept override {
    ++retries;
    return true;
  }
  std::atomic<int> initial{0};
  std::atomic<int> retries{0};
};

/// Records the attempts and stops an observer is told of.
struct recording_observer final : coretry::retry_observer {
  void attempt_started(const coretry::attempt_started_event& e) noexcept override { started.push_back(e.attempt); }
  void attempt_finished(const coretry::attempt_finished_event& e) noexcept override {
    finished.push_back(e.record.number);
  }
  void stopped(const coretry::stop_event& e) noexcept override {
    stops.push_back(e.reason);
    stop_attempts = e.attempts;
  }
  std::vector<unsigned> started, finished;
  std::vector<stop_reason> stops;
  unsigned stop_attempts = 0;
};

/// Counts the results a gate is told.
struct counting_gate final : coretry::retry_gate {
  void record(coretry::attempt_status, coretry::duration) noexcept override { ++recorded; }
  coretry::gate_decision ask(coretry::duration, coretry::duration, const coretry::gate_decision*) noexcept override {
    return {};
  }
  std::atomic<int> recorded{0};
};

} // namespace

TEST_CASE("redirect rules: only 301, 302, 303, 307 and 308 with a Location are followed") {
  for (const unsigned status : {301u, 302u, 303u, 307u, 308u})
    CHECK(step(status, "/z").action == redirect_step::kind::follow);
  for (const unsigned status : {300u, 304u, 305u, 306u, 200u, 404u})
    CHECK(step(status, "/z").action == redirect_step::kind::final_answer);
  CHECK(next_redirect("http://a/", beast_http::verb::get, answer(301, {}), 0, follow()).action ==
        redirect_step::kind::final_answer);
  CHECK(step(302, "").action == redirect_step::kind::final_answer); // an empty Location is none
}

TEST_CASE("redirect rules: the method by RFC 9110 §15.4") {
  using beast_http::verb;
  const auto to_get = [](unsigned status, verb method) { return step(status, "/z", "http://a/", method).to_get; };
  CHECK(to_get(303, verb::post));
  CHECK(to_get(303, verb::put));
  CHECK_FALSE(to_get(303, verb::head));
  CHECK(to_get(301, verb::post));
  CHECK(to_get(302, verb::post));
  CHECK_FALSE(to_get(301, verb::put));
  CHECK_FALSE(to_get(302, verb::delete_));
  for (const verb method : {verb::post, verb::put, verb::patch}) {
    CHECK_FALSE(to_get(307, method));
    CHECK_FALSE(to_get(308, method));
  }
}

TEST_CASE("redirect rules: a relative Location resolved against the URL, its fragment carried over when it has none") {
  CHECK(step(301, "z").target == "http://a.example/x/z#f");
  CHECK(step(301, "../z").target == "http://a.example/z#f");
  CHECK(step(301, "/p?r=1").target == "http://a.example/p?r=1#f");
  CHECK(step(301, "?r=2").target == "http://a.example/x/y?r=2#f");
  CHECK(step(301, "//b.example:8080/p").target == "http://b.example:8080/p#f");
  CHECK(step(301, "/p#g").target == "http://a.example/p#g");
  CHECK(step(301, "https://c.example/").target == "https://c.example/#f");
  CHECK(step(301, "/p", "http://a.example/x").target == "http://a.example/p");
  // Raw UTF-8 is percent-encoded.
  CHECK(step(301, "/caf\xc3\xa9").target == "http://a.example/caf%C3%A9#f");
  // The URL's userinfo is not the Location's; the Location's own is kept.
  const auto relative = step(301, "/p", "http://u:pw@a.example/");
  CHECK(relative.target == "http://a.example/p");
  CHECK_FALSE(relative.own_userinfo);
  const auto own = step(301, "http://v:x@b.example/");
  CHECK(own.target == "http://v:x@b.example/#f");
  CHECK(own.own_userinfo);
}

TEST_CASE("redirect rules: a Location that is not a URL the client would request is refused, naming it") {
  const auto refused = [](const redirect_step& s, const std::string& named) {
    CHECK(s.action == redirect_step::kind::refuse);
    CHECK(s.error == redirect_error::bad_location);
    CHECK_MESSAGE(s.problem.find(named) != std::string::npos, s.problem);
  };
  refused(step(301, "ftp://a.example/f"), "ftp");
  refused(step(301, "http://bad host/"), "space");
  refused(step(301, "/a\x01z"), "control");
  refused(step(301, "http://[::1/"), "not a URL");
  refused(step(301, "http://a..b/"), "DNS name");
  refused(step(301, "http://a.example:0/"), "port");
  refused(step(301, "/" + std::string(redirect_options::max_location_length, 'a')), "longer than 8000");
  refused(next_redirect("http://a/", beast_http::verb::get, answer(302, {"/1", "/2"}), 0, follow()),
          "more than one Location");
  // Credentials in a refused Location are not repeated in the problem.
  const auto s = step(301, "gopher://user:secret@a.example/");
  CHECK(s.problem.find("secret") == std::string::npos);
}

TEST_CASE("redirect rules: https to http refused unless allowed, and past the maximum is too_many_redirects") {
  const auto down = step(301, "http://a.example/", "https://a.example/");
  CHECK(down.action == redirect_step::kind::refuse);
  CHECK(down.error == redirect_error::insecure_redirect);
  redirect_options allowed = follow();
  allowed.allow_insecure = true;
  CHECK(step(301, "http://a.example/", "https://a.example/", beast_http::verb::get, 0, allowed).action ==
        redirect_step::kind::follow);
  CHECK(step(301, "https://a.example/", "http://a.example/").action == redirect_step::kind::follow);

  CHECK(step(302, "/n", "http://a.example/", beast_http::verb::get, 9, follow(10)).action ==
        redirect_step::kind::follow);
  const auto over = step(302, "/n", "http://a.example/", beast_http::verb::get, 10, follow(10));
  CHECK(over.action == redirect_step::kind::refuse);
  CHECK(over.error == redirect_error::too_many_redirects);
  CHECK_MESSAGE(over.problem.find("http://a.example/n") != std::string::npos, over.problem);
  CHECK(step(302, "/n", "http://a.example/", beast_http::verb::get, 0, follow(0)).error ==
        redirect_error::too_many_redirects);
}

TEST_CASE("redirects: more than 1,000 hops is refused before anything is sent") {
  coretry_tests::blocking_client c;
  auto o = following(redirect_options::max_redirects_cap + 1);
  CHECK_THROWS_AS(c.client.async_send("http://127.0.0.1:1/", coretry::http::request(beast_http::verb::get, "", 11), o,
                                      [](std::exception_ptr, coretry::http::result) {}),
                  std::invalid_argument);
  CHECK_THROWS_AS(c.client.async_send("ftp://127.0.0.1/", coretry::http::request(beast_http::verb::get, "", 11),
                                      following(), [](std::exception_ptr, coretry::http::result) {}),
                  std::invalid_argument);
}

TEST_CASE("redirects are off by default: a 301 is the final answer") {
  answering_server server([](const std::string&, const std::string&) { return response(301, "/elsewhere", "moved"); });
  coretry_tests::blocking_client c;
  coretry::http::request_options o;
  o.policy = loopback_policy();
  const auto r = c.send(beast_http::verb::get, server.url("/"), o);
  CHECK(r.reason == stop_reason::rejected);
  CHECK(r.attempts == 1);
  CHECK(r.value->res->result_int() == 301);
  CHECK(r.value->res->body() == "moved");
  CHECK(r.value->redirects.empty());
  CHECK(server.server.requests().size() == 1);
}

TEST_CASE("a 307 and a 308 keep the method, the body and the Idempotency-Key, and each hop is in the exchange") {
  answering_server server([](const std::string& head, const std::string&) {
    const std::string line = request_line(head);
    if (line.find(" /a ") != std::string::npos) return response(307, "/b");
    if (line.find(" /b ") != std::string::npos) return response(308, "c");
    return response(200, {}, "done");
  });
  coretry_tests::blocking_client c;
  auto o = following();
  o.generate_idempotency_key = true;
  const auto r = c.send(beast_http::verb::post, server.url("/a"), o, "payload");
  REQUIRE(r.reason == stop_reason::succeeded);
  CHECK(r.value->res->body() == "done");
  CHECK(r.attempts == 3);
  REQUIRE(r.value->redirects.size() == 2);
  CHECK(r.value->redirects[0].status == 307);
  CHECK(r.value->redirects[0].location == "/b");
  CHECK(r.value->redirects[0].method == "POST");
  CHECK(r.value->redirects[0].url == server.url("/a"));
  CHECK(r.value->redirects[0].target == server.url("/b"));
  CHECK(r.value->redirects[0].address->port() == server.server.port());
  CHECK(r.value->redirects[1].status == 308);
  CHECK(r.value->redirects[1].target == server.url("/c"));
  const auto heads = server.server.requests();
  REQUIRE(heads.size() == 3);
  const std::string key = header_value(heads[0], "Idempotency-Key");
  CHECK(!key.empty());
  for (const auto& head : heads) {
    CHECK(head.starts_with("POST "));
    CHECK(header_value(head, "Content-Length") == "7");
    CHECK(header_value(head, "Idempotency-Key") == key);
  }
}

TEST_CASE("a 303 turns a POST into a GET without a body, and a 301 and a 302 do the same to a POST only") {
  std::vector<std::string> bodies;
  std::mutex mutex;
  answering_server server([&](const std::string& head, const std::string& body) {
    {
      std::lock_guard lock(mutex);
      bodies.push_back(body);
    }
    const std::string line = request_line(head);
    if (line.find(" /303 ") != std::string::npos) return response(303, "/done");
    if (line.find(" /301 ") != std::string::npos) return response(301, "/done");
    return response(200, {}, "ok");
  });
  coretry_tests::blocking_client c;
  auto o = following();
  o.idempotency_key = "k-1";
  auto r = c.send(beast_http::verb::post, server.url("/303"), o, "form=1");
  REQUIRE(r.reason == stop_reason::succeeded);
  auto heads = server.server.requests();
  REQUIRE(heads.size() == 2);
  CHECK(heads[1].starts_with("GET /done "));
  CHECK_FALSE(has_header(heads[1], "Content-Length"));
  CHECK_FALSE(has_header(heads[1], "Idempotency-Key"));
  CHECK(bodies[1].empty());

  r = c.send(beast_http::verb::put, server.url("/301"), o, "whole");
  REQUIRE(r.reason == stop_reason::succeeded);
  heads = server.server.requests();
  REQUIRE(heads.size() == 4);
  CHECK(heads[3].starts_with("PUT /done "));
  CHECK(bodies[3] == "whole");
  r = c.send(beast_http::verb::post, server.url("/301"), o, "form=2");
  heads = server.server.requests();
  REQUIRE(heads.size() == 6);
  CHECK(heads[5].starts_with("GET /done "));
}

TEST_CASE("a redirect loop stops at the maximum as rejected, too_many_redirects, naming the last URL") {
  answering_server server([](const std::string&, const std::string&) { return response(302, "/again"); });
  coretry_tests::blocking_client c;
  const auto r = c.send(beast_http::verb::get, server.url("/again"), following(3));
  CHECK(r.reason == stop_reason::rejected);
  CHECK(r.last_error == redirect_error::too_many_redirects);
  CHECK(r.records.back().classified.category == "too_many_redirects");
  CHECK_MESSAGE(r.value->problem.find(server.url("/again")) != std::string::npos, r.value->problem);
  CHECK(r.value->redirects.size() == 3);
  CHECK(r.attempts == 4);
  CHECK(server.server.requests().size() == 4);
}

TEST_CASE("a Location that is not a valid URL ends the request as rejected, naming it") {
  answering_server server([](const std::string&, const std::string&) { return response(301, "http://exa mple/"); });
  coretry_tests::blocking_client c;
  const auto r = c.send(beast_http::verb::get, server.url("/"), following());
  CHECK(r.reason == stop_reason::rejected);
  CHECK(r.last_error == redirect_error::bad_location);
  CHECK(r.attempts == 1);
  CHECK_MESSAGE(r.value->problem.find("http://exa mple/") != std::string::npos, r.value->problem);
}

TEST_CASE("credentials go to the first origin only, unless trusted") {
  answering_server other([](const std::string&, const std::string&) { return response(200, {}, "there"); });
  answering_server first([&](const std::string& head, const std::string&) {
    if (request_line(head).find(" /same ") != std::string::npos) return response(302, "/there");
    if (request_line(head).find(" /there ") != std::string::npos) return response(302, other.url("/x"));
    return response(302, "/same");
  });
  coretry_tests::blocking_client c;
  const auto send = [&](bool trusted) {
    coretry::http::request req(beast_http::verb::get, "", 11);
    req.set(beast_http::field::cookie, "sid=1");
    req.set(beast_http::field::proxy_authorization, "Basic cHg6cHg=");
    req.set(beast_http::field::host, "127.0.0.1:" + std::to_string(first.server.port()));
    auto o = following();
    o.redirects.trusted = trusted;
    std::optional<coretry::http::result> result;
    const std::string url = "http://user:pw@127.0.0.1:" + std::to_string(first.server.port()) + "/start";
    c.client.async_send(url, std::move(req), o, [&](std::exception_ptr, coretry::http::result r) { result = std::move(r); });
    c.io.run();
    c.io.restart();
    REQUIRE(result);
    CHECK(result->reason == stop_reason::succeeded);
    CHECK(result->value->redirects.size() == 3);
    // The hop's URL is recorded without its credentials.
    CHECK(result->value->redirects[0].url.find("pw") == std::string::npos);
  };
  send(false);
  auto heads = first.server.requests();
  REQUIRE(heads.size() == 3);
  for (const auto& head : heads) {
    CHECK(header_value(head, "Authorization") == "Basic dXNlcjpwdw==");
    CHECK(has_header(head, "Cookie"));
    CHECK(has_header(head, "Proxy-Authorization"));
  }
  auto there = other.server.requests();
  REQUIRE(there.size() == 1);
  CHECK_FALSE(has_header(there[0], "Authorization"));
  CHECK_FALSE(has_header(there[0], "Cookie"));
  CHECK_FALSE(has_header(there[0], "Proxy-Authorization"));
  CHECK(header_value(there[0], "Host") == "127.0.0.1:" + std::to_string(other.server.port()));

  send(true);
  there = other.server.requests();
  REQUIRE(there.size() == 2);
  CHECK(header_value(there[1], "Authorization") == "Basic dXNlcjpwdw==");
  CHECK(has_header(there[1], "Cookie"));
  // Proxy credentials are never a server's: trusted or not, another
  // origin's hop goes without them.
  CHECK_FALSE(has_header(there[1], "Proxy-Authorization"));
  CHECK(header_value(there[1], "Host") == "127.0.0.1:" + std::to_string(other.server.port()));
}

TEST_CASE("a hop is a new request: no budget token, and retries of every hop count against max_attempts") {
  std::atomic<int> a_count{0}, b_count{0};
  answering_server b([&](const std::string&, const std::string&) {
    ++b_count;
    return response(503, {});
  });
  answering_server a([&](const std::string&, const std::string&) {
    return ++a_count == 1 ? response(503, {}) : response(307, b.url("/b"));
  });
  coretry_tests::blocking_client c;
  counting_budget budget;
  recording_observer observer;
  auto o = following();
  o.policy.max_attempts = 3;
  o.budget = &budget;
  o.observer = &observer;
  const auto r = c.send(beast_http::verb::get, a.url("/a"), o);
  // A: 503, 307 (one retry); B: 503, 503 (one retry left): 4 attempts.
  CHECK(r.reason == stop_reason::attempts_exhausted);
  CHECK(r.attempts == 4);
  CHECK(a_count == 2);
  CHECK(b_count == 2);
  CHECK(budget.retries == 2); // the retries, not the hop
  CHECK(budget.initial == 2);  // a hop is a new request
  REQUIRE(r.records.size() == 4);
  for (unsigned i = 0; i < 4; ++i) CHECK(r.records[i].number == i + 1);
  CHECK(r.records[1].classified.category == "redirect");
  // The observer sees one operation: attempts numbered on, one stop.
  CHECK(observer.started == std::vector<unsigned>{1, 2, 3, 4});
  CHECK(observer.finished == std::vector<unsigned>{1, 2, 3, 4});
  CHECK(observer.stops == std::vector<stop_reason>{stop_reason::attempts_exhausted});
  CHECK(observer.stop_attempts == 4);
  CHECK(r.records[2].start >= r.records[1].end);
  REQUIRE(r.value->redirects.size() == 1);
}

TEST_CASE("a hop to another origin tells nothing to the first dependency's gate") {
  answering_server other([](const std::string&, const std::string&) { return response(200, {}, "x"); });
  answering_server first([&](const std::string& head, const std::string&) {
    if (request_line(head).find(" /same ") != std::string::npos) return response(307, other.url("/"));
    return response(307, "/same");
  });
  coretry_tests::blocking_client c;
  counting_gate gate;
  auto o = following();
  o.gate = &gate;
  const auto r = c.send(beast_http::verb::get, first.url("/"), o);
  CHECK(r.reason == stop_reason::succeeded);
  CHECK(r.attempts == 3);
  CHECK(gate.recorded == 2); // the two answers of the first origin
}

TEST_CASE("a redirect's body never reaches the body sink, the final one's does") {
  answering_server server([](const std::string& head, const std::string&) {
    if (request_line(head).find(" /moved ") != std::string::npos) return response(301, "/here", "redirect body");
    return response(200, {}, "final body");
  });
  coretry_tests::blocking_client c;
  std::string sunk;
  auto o = following();
  o.stream_body = [](const beast_http::response_header<>&) { return true; };
  o.body_sink = [&](std::string_view piece) {
    sunk += piece;
    return boost::system::error_code{};
  };
  const auto r = c.send(beast_http::verb::get, server.url("/moved"), o);
  CHECK(r.reason == stop_reason::succeeded);
  CHECK(sunk == "final body");
}

TEST_CASE("a 307 of a body that cannot be reproduced stops with a reason naming the redirect") {
  answering_server server([](const std::string& head, const std::string&) {
    if (request_line(head).find(" /a ") != std::string::npos) return response(307, "/b");
    return response(200, {}, "ok");
  });
  coretry_tests::blocking_client c;
  auto o = following();
  o.idempotency_key = "k";
  unsigned calls = 0;
  o.body = [&](unsigned attempt) -> std::optional<std::string> {
    ++calls;
    if (attempt == 1) return std::string("stream");
    return std::nullopt; // consumed
  };
  coretry::http::request req(beast_http::verb::post, "", 11);
  req.set(beast_http::field::content_length, "6");
  std::optional<coretry::http::result> result;
  c.client.async_send(server.url("/a"), std::move(req), o,
                      [&](std::exception_ptr, coretry::http::result r) { result = std::move(r); });
  c.io.run();
  REQUIRE(result);
  CHECK(result->reason == stop_reason::rejected);
  CHECK(calls == 2);
  CHECK_MESSAGE(result->value->problem.find("redirect") != std::string::npos, result->value->problem);
  CHECK_MESSAGE(result->value->problem.find("cannot be reproduced") != std::string::npos, result->value->problem);
  CHECK(server.server.requests().size() == 1);
}

TEST_CASE("slow redirects end within the overall deadline, which spans every hop and cuts the last") {
  coretry_tests::blocking_client c;
  auto o = following(50);
  o.policy = loopback_policy(300ms, 1000ms);
  o.policy.min_attempt_allowance = 100ms;
  o.policy.completion_reserve = 50ms;
  {
    // Each hop answers after 50 ms, redirecting to itself: three hops, then
    // less than 150 ms left, too little for an attempt and the reserve.
    answering_server loop([](const std::string&, const std::string&) {
      std::this_thread::sleep_for(50ms);
      return response(307, "/again");
    });
    const auto started = std::chrono::steady_clock::now();
    const auto r = c.send(beast_http::verb::get, loop.url("/again"), o);
    const auto took = std::chrono::steady_clock::now() - started;
    CHECK(r.reason == stop_reason::deadline_exhausted);
    CHECK(r.value->redirects.size() >= 2); // 3 unless the machine is slow
    CHECK(r.value->redirects.size() <= 3);
    CHECK(took < 300ms);
  }
  {
    // The third hop is slower than what is left: its attempt is cut at the
    // overall deadline less the reserve, not at its own attempt limit.
    std::atomic<int> seen{0};
    answering_server slower([&](const std::string&, const std::string&) {
      std::this_thread::sleep_for(++seen <= 2 ? 50ms : 400ms);
      return response(307, "/again");
    });
    const auto started = std::chrono::steady_clock::now();
    const auto r = c.send(beast_http::verb::get, slower.url("/again"), o);
    const auto took = std::chrono::steady_clock::now() - started;
    CHECK(r.reason == stop_reason::deadline_exhausted);
    CHECK(r.records.back().error == coretry::attempt_error::timed_out);
    CHECK(r.value->redirects.size() == 2);
    CHECK(took < 300ms);
  }
}

TEST_CASE("an https URL redirected to http is refused by default") {
  coretry::faults::fault_server_options tls;
  tls.tls = true;
  server_thread secure(tls);
  server_thread plain;
  char name[] = "/tmp/coretry-redirect-ca-XXXXXX";
  const int fd = ::mkstemp(name);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(name) << secure->ca_certificate_pem();
  coretry::http::client_options co;
  co.ca_file = name;
  coretry_tests::blocking_client c(co);
  const std::string target = plain.url("/status/200");
  const auto r = c.send(beast_http::verb::get, secure.url("/status/301?header=Location:" + target), following());
  CHECK(r.reason == stop_reason::rejected);
  CHECK(r.last_error == redirect_error::insecure_redirect);
  CHECK_MESSAGE(r.value->problem.find(target) != std::string::npos, r.value->problem);
  CHECK(plain->log().empty());

  auto o = following();
  o.redirects.allow_insecure = true;
  const auto allowed = c.send(beast_http::verb::get, secure.url("/status/301?header=Location:" + target), o);
  CHECK(allowed.reason == stop_reason::succeeded);
  CHECK(plain->log().size() == 1);
  std::remove(name);
}

TEST_CASE("redirects from a real nginx: 301, 303, 307 and 308 by their rules, a loop stopped at the maximum") {
  if (coretry::test::nginx_program().empty()) return coretry::test::skip_test("nginx is not installed");
  coretry::test::nginx server(R"(
    location = /moved { return 301 /final; }
    location = /other { return 303 /final; }
    location = /temp { return 307 http://127.0.0.1:PORT/final; }
    location = /perm { return 308 final; }
    location = /loop { return 302 /loop; }
    location = /final { return 200 "final"; }
  )");
  coretry_tests::blocking_client c;
  const auto post = [&](const std::string& target) {
    auto o = following();
    o.idempotency_key = "k";
    return c.send(beast_http::verb::post, server.url(target), o, "payload");
  };
  auto r = c.send(beast_http::verb::get, server.url("/moved"), following());
  CHECK(r.reason == stop_reason::succeeded);
  CHECK(r.value->res->body() == "final");
  REQUIRE(r.value->redirects.size() == 1);
  CHECK(r.value->redirects[0].status == 301);
  CHECK(r.value->redirects[0].target == server.url("/final"));

  for (const std::string target : {"/temp", "/perm"}) {
    r = post(target);
    CHECK(r.reason == stop_reason::succeeded);
    CHECK(r.value->res->body() == "final");
  }
  r = post("/moved");
  CHECK(r.reason == stop_reason::succeeded);
  r = post("/other");
  CHECK(r.reason == stop_reason::succeeded);
  r = c.send(beast_http::verb::get, server.url("/loop"), following(5));
  CHECK(r.reason == stop_reason::rejected);
  CHECK(r.last_error == redirect_error::too_many_redirects);
  CHECK(r.value->redirects.size() == 5);

  const std::vector<std::string> expected = {
      "GET /moved - -",   "GET /final - -",                      // 301
      "POST /temp 7 -",   "POST /final 7 -",                     // 307 keeps the method and the body
      "POST /perm 7 -",   "POST /final 7 -",                     // 308 too
      "POST /moved 7 -",  "GET /final - -",                      // 301 turns a POST into a GET
      "POST /other 7 -",  "GET /final - -",                      // 303 too
      "GET /loop - -",    "GET /loop - -", "GET /loop - -", "GET /loop - -", "GET /loop - -",
      "GET /loop - -"};                                          // 5 followed, the 6th answer refused
  // nginx writes its access log as each request ends, perhaps after the
  // client has read the answer.
  CHECK(coretry::test::eventually([&] { return server.requests().size() >= expected.size(); }));
  CHECK(server.requests() == expected);
}

TEST_CASE("the proxy is chosen for each hop: NO_PROXY per host, Proxy-Authorization only with the proxy") {
  // The origin on 127.0.0.2 is reached directly (no_proxy); the proxy on
  // 127.0.0.1 answers for every other origin itself.
  hostile_server direct(
      {[](hostile_server::peer& p) {
        while (p.read_request())
          if (!p.send(response(302, "http://far.example/final"))) return;
      }},
      "127.0.0.2", 0);
  const std::string direct_url = "http://127.0.0.2:" + std::to_string(direct.port());
  answering_server proxy([&](const std::string& head, const std::string&) {
    if (request_line(head).find("/start") != std::string::npos) return response(307, direct_url + "/middle");
    return response(200, {}, "through the proxy");
  });
  coretry::http::client_options co;
  co.proxy = "http://px:secret@127.0.0.1:" + std::to_string(proxy.server.port());
  co.no_proxy = "127.0.0.2";
  coretry_tests::blocking_client c(co);
  const auto r = c.send(beast_http::verb::get, "http://near.example/start", following());
  REQUIRE(r.reason == stop_reason::succeeded);
  CHECK(r.value->res->body() == "through the proxy");
  CHECK(r.value->redirects.size() == 2);
  const auto through = proxy.server.requests();
  REQUIRE(through.size() == 2);
  CHECK(through[0].starts_with("GET http://near.example:80/start "));
  CHECK(through[1].starts_with("GET http://far.example:80/final "));
  for (const auto& head : through) CHECK(header_value(head, "Proxy-Authorization") == "Basic cHg6c2VjcmV0");
  const auto straight = direct.requests();
  REQUIRE(straight.size() == 1);
  CHECK(straight[0].starts_with("GET /middle "));
  CHECK_FALSE(has_header(straight[0], "Proxy-Authorization"));
}

TEST_CASE("cancelling a request while a later hop runs stops the chain as cancelled") {
  answering_server server([](const std::string& head, const std::string&) {
    if (request_line(head).find(" /a ") != std::string::npos) return response(307, "/slow");
    std::this_thread::sleep_for(300ms);
    return response(200, {}, "late");
  });
  coretry_tests::blocking_client c;
  boost::asio::cancellation_signal cancel;
  boost::asio::steady_timer timer(c.io, 100ms);
  timer.async_wait([&](boost::system::error_code) { cancel.emit(boost::asio::cancellation_type::terminal); });
  std::optional<coretry::http::result> result;
  const auto started = std::chrono::steady_clock::now();
  c.client.async_send(server.url("/a"), coretry::http::request(beast_http::verb::get, "", 11), following(),
                      boost::asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e, coretry::http::result r) {
                        CHECK_FALSE(e);
                        result = std::move(r);
                      }));
  c.io.run();
  REQUIRE(result);
  CHECK(result->reason == stop_reason::cancelled);
  // Normally during the second hop; under a sanitizer the first may take
  // the 100 ms, or the signal may come between the two.
  CHECK(result->attempts <= 2);
  CHECK(std::chrono::steady_clock::now() - started < 250ms);
}

TEST_CASE("a hop to another origin with a percentile hedge delay runs on the fixed delay and completes") {
  answering_server other([](const std::string&, const std::string&) { return response(200, {}, "there"); });
  answering_server first([&](const std::string&, const std::string&) { return response(301, other.url("/")); });
  coretry_tests::blocking_client c;
  coretry::latency_tracker tracker;
  recording_observer observer;
  auto o = following();
  o.policy.hedging.max_hedges = 1;
  o.policy.hedging.delay_percentile = 95.0;
  o.tracker = &tracker;
  o.observer = &observer;
  // The first dependency's latencies say nothing of the other origin's: its
  // hop hedges on the policy's fixed delay, not on the first one's tracker
  // (which it may not be given), and the chain ends through its handler.
  const auto r = c.send(beast_http::verb::get, first.url("/"), o);
  CHECK(r.reason == stop_reason::succeeded);
  REQUIRE(r.value);
  CHECK(r.value->redirects.size() == 1);
  CHECK(observer.stops == std::vector<stop_reason>{stop_reason::succeeded});
}

TEST_CASE("a setup the engine refuses throws from async_send whatever the token, redirects followed or not") {
  coretry_tests::blocking_client c;
  for (const bool follow_them : {false, true}) {
    CAPTURE(follow_them);
    coretry::http::request_options o;
    o.policy = loopback_policy();
    o.redirects.follow = follow_them;
    o.policy.hedging.max_hedges = 1;
    o.policy.hedging.delay_percentile = 95.0; // and no tracker
    CHECK_THROWS_WITH_AS(c.client.async_send("http://127.0.0.1:9/", coretry::http::request(beast_http::verb::get, "", 11),
                                             o, boost::asio::deferred),
                         doctest::Contains("needs retry_options::tracker"), std::invalid_argument);
  }
}
