// The HTTP client against hostile servers: raw sockets on loopback, each
// connection scripted byte by byte. The clean end is asserted: the stop
// reason, what reached the server, and (outside sanitizers) memory.

#include "blocking_client.hpp"
#include "hostile_server.hpp"
#include "policies.hpp"

#include <coretry/http/client.hpp>

#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <stdexcept>
#include <optional>
#include <thread>
#include <string>

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using namespace std::chrono_literals;
using coretry::stop_reason;
using coretry_tests::hostile_server;

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif
#else
constexpr bool sanitized = false;
#endif

/// This process's resident memory, in bytes (VmRSS of /proc/self/status).
std::size_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  FAIL("no VmRSS in /proc/self/status");
  return 0;
}

/// loopback_policy with time for a server that takes its time on purpose.
coretry::policy hostile_policy() { return coretry::test::loopback_policy(10s, 8s); }

/// The blocking client, with hostile_policy() unless told another.
struct client_harness : coretry_tests::blocking_client {
  using blocking_client::blocking_client;

  coretry::http::result send(beast_http::verb method, const std::string& url, coretry::policy p = hostile_policy()) {
    coretry::http::request_options options;
    options.policy = p;
    return blocking_client::send(method, url, options);
  }
};

/// Sends `prefix`, then `filler` again and again until the client goes away
/// (or `cap` bytes: a client without bounds would otherwise never stop).
hostile_server::script endless(std::string prefix, std::string filler, std::size_t cap = 512u << 20) {
  return [prefix = std::move(prefix), filler = std::move(filler), cap](hostile_server::peer& peer) {
    if (!peer.read_request()) return;
    if (!peer.send(prefix)) return;
    std::string block;
    while (block.size() < 64 * 1024) block += filler;
    for (std::size_t sent = 0; sent < cap; sent += block.size())
      if (!peer.send(block)) return;
  };
}

/// One endless-response case: the attempt ends at once, permanently, with
/// `expected`; memory stays bounded.
void check_bounded(const hostile_server::script& script, const std::string& expected_category,
                   boost::system::error_code expected) {
  hostile_server server(script);
  client_harness h;
  const std::size_t before = resident_bytes();
  const auto start = std::chrono::steady_clock::now();
  const auto r = h.send(beast_http::verb::get, server.url() + "/endless");
  const auto took = std::chrono::steady_clock::now() - start;
  const std::size_t after = resident_bytes();
  CHECK(r.reason == stop_reason::rejected);
  CHECK(r.attempts == 1);
  REQUIRE(r.records.size() == 1);
  CHECK(r.records[0].classified.category == expected_category);
  CHECK(r.value->error == expected);
  CHECK(took < 2s);
  CHECK(h.client.stats().open == 0);
  CHECK(server.connections() == 1);
  if (!sanitized) {
    CAPTURE(before);
    CAPTURE(after);
    CHECK(after < before + (64u << 20));
  }
}

} // namespace

TEST_CASE("hostile: an endless chunk-size line is refused at once, with bounded memory") {
  check_bounded(endless("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;x=", "a"), "response_line_too_long",
                coretry::http::response_error::line_too_long);
}

TEST_CASE("hostile: endless trailers are refused at once, with bounded memory") {
  check_bounded(endless("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n",
                        "X-Trailer: aaaaaaaaaaaaaaaa\r\n"),
                "response_line_too_long", coretry::http::response_error::line_too_long);
}

TEST_CASE("hostile: an endless stream of interim responses is refused at once") {
  check_bounded(endless("", "HTTP/1.1 100 Continue\r\n\r\n"), "too_many_interim_responses",
                coretry::http::response_error::too_many_interim_responses);
}

TEST_CASE("hostile: interim responses up to the limit are skipped") {
  coretry::http::client_options options;
  options.max_interim_responses = 3;
  std::string three;
  for (int i = 0; i < 3; ++i) three += "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n";
  hostile_server server([&](hostile_server::peer& peer) {
    if (peer.read_request()) peer.send(three + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    peer.wait_for_close();
  });
  client_harness h(options);
  const auto r = h.send(beast_http::verb::get, server.url() + "/three");
  REQUIRE(r.succeeded());
  CHECK(r.value->res->body() == "ok");
}

TEST_CASE("hostile: a chunk extension within the line limit is accepted") {
  coretry::http::client_options options;
  options.line_limit = 256;
  hostile_server server([](hostile_server::peer& peer) {
    if (peer.read_request())
      peer.send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;name=" + std::string(100, 'v') +
                "\r\nok\r\n0\r\n\r\n");
    peer.wait_for_close();
  });
  client_harness h(options);
  const auto r = h.send(beast_http::verb::get, server.url() + "/ext");
  REQUIRE(r.succeeded());
  CHECK(r.value->res->body() == "ok");
}

namespace {

/// Answers every request on its connection with a 200 whose body is `body`.
hostile_server::script answers(std::string body) {
  return [body = std::move(body)](hostile_server::peer& peer) {
    while (peer.read_request())
      if (!peer.send("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body)) return;
  };
}

/// Answers the first request with `answer`, then, 20 ms later and unasked,
/// sends `unsolicited`; a request that still comes on this connection gets
/// nothing more.
hostile_server::script then_unsolicited(std::string answer, std::string unsolicited) {
  return [answer = std::move(answer), unsolicited = std::move(unsolicited)](hostile_server::peer& peer) {
    if (!peer.read_request() || !peer.send(answer)) return;
    std::this_thread::sleep_for(20ms);
    if (!peer.send(unsolicited)) return;
    peer.wait_for_close();
  };
}

/// Sends a GET with `h` to a server that answers it 503 (Retry-After: 1),
/// then sends `unsolicited` on that connection, and answers "fresh" on the
/// next: checks that the retry, on a second connection, got "fresh", and
/// returns the result.
coretry::http::result get_after_503_then(std::string unsolicited, client_harness& h) {
  hostile_server server({then_unsolicited("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n",
                                          std::move(unsolicited)),
                         answers("fresh")});
  coretry::http::result r = h.send(beast_http::verb::get, server.url() + "/a");
  REQUIRE(r.succeeded());
  CHECK(r.attempts == 2);
  CHECK(r.records[0].classified.category == "http_503");
  CHECK(r.value->res->body() == "fresh");
  CHECK(server.connections() == 2);
  return r;
}

} // namespace

TEST_CASE("hostile: an unsolicited 200 after a 503 is never the retry's answer") {
  client_harness h;
  const auto r = get_after_503_then("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nSTALE!", h);
  CHECK_FALSE(r.value->reused_connection);
  CHECK(h.client.stats().stale_discarded == 1);
}

TEST_CASE("hostile: stray bytes after a 503 leave it a retryable 503") {
  client_harness h;
  get_after_503_then("garbage", h);
}

TEST_CASE("hostile: a body sent after a HEAD response does not poison the next request") {
  hostile_server server({then_unsolicited("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "hello"), answers("fresh")});
  client_harness h;
  const auto head = h.send(beast_http::verb::head, server.url() + "/h");
  REQUIRE(head.succeeded());
  CHECK(head.value->res->body().empty());
  std::this_thread::sleep_for(100ms); // the stray body arrives while the connection is idle
  const auto next = h.send(beast_http::verb::get, server.url() + "/g");
  REQUIRE(next.succeeded());
  CHECK(next.attempts == 1);
  CHECK(next.value->res->body() == "fresh");
  CHECK_FALSE(next.value->reused_connection);
  CHECK(server.connections() == 2);
}

TEST_CASE("hostile: a 408 sent on an idle connection is not the answer to the next GET") {
  hostile_server server(
      {then_unsolicited("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst",
                        "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"),
       answers("second")});
  client_harness h;
  REQUIRE(h.send(beast_http::verb::get, server.url() + "/1").succeeded());
  std::this_thread::sleep_for(100ms);
  const auto r = h.send(beast_http::verb::get, server.url() + "/2");
  REQUIRE(r.succeeded());
  CHECK(r.attempts == 1);
  CHECK(r.records[0].classified.category == "http_2xx");
  CHECK(r.value->res->body() == "second");
  CHECK(server.connections() == 2);
  const auto seen = server.requests();
  REQUIRE(seen.size() == 2);
  CHECK(seen[1].rfind("GET /2 ", 0) == 0);
}

TEST_CASE("hostile: a 204 and a 304 leave nothing for the next exchange") {
  hostile_server server({[](hostile_server::peer& peer) {
                           if (!peer.read_request()) return;
                           // A 204 has no body whatever it announces; the bytes after it are stray.
                           peer.send("HTTP/1.1 204 No Content\r\nContent-Length: 4\r\n\r\n");
                           std::this_thread::sleep_for(20ms);
                           peer.send("junk");
                           peer.wait_for_close();
                         },
                         [](hostile_server::peer& peer) {
                           if (!peer.read_request()) return;
                           peer.send("HTTP/1.1 304 Not Modified\r\nContent-Length: 4\r\n\r\n");
                           std::this_thread::sleep_for(20ms);
                           peer.send("junk");
                           peer.wait_for_close();
                         },
                         answers("clean")});
  client_harness h;
  const auto no_content = h.send(beast_http::verb::get, server.url() + "/204");
  REQUIRE(no_content.value->res);
  CHECK(no_content.value->res->result_int() == 204);
  CHECK(no_content.attempts == 1);
  std::this_thread::sleep_for(100ms);
  const auto not_modified = h.send(beast_http::verb::get, server.url() + "/304");
  REQUIRE(not_modified.value->res);
  CHECK(not_modified.value->res->result_int() == 304);
  CHECK(not_modified.attempts == 1);
  CHECK_FALSE(not_modified.value->reused_connection);
  std::this_thread::sleep_for(100ms);
  const auto last = h.send(beast_http::verb::get, server.url() + "/last");
  REQUIRE(last.succeeded());
  CHECK(last.value->res->body() == "clean");
  CHECK(last.attempts == 1);
  CHECK(server.connections() == 3);
}

TEST_CASE("strict URLs: the authority is what the text says") {
  const auto nip = coretry::http::parse_url("http://127.0.0.1.nip.io:8080/a");
  CHECK(nip.host == "127.0.0.1.nip.io");
  CHECK(nip.port == 8080);
  CHECK(nip.explicit_port);
  CHECK(nip.target == "/a");
  CHECK_FALSE(nip.user);

  const auto mixed = coretry::http::parse_url("https://Books.Example.COM/x?y=1#section");
  CHECK(mixed.tls);
  CHECK(mixed.host == "books.example.com");
  CHECK(mixed.port == 443);
  CHECK_FALSE(mixed.explicit_port);
  CHECK(mixed.target == "/x?y=1");

  const auto v6 = coretry::http::parse_url("http://[::1]:81");
  CHECK(v6.host == "::1");
  CHECK(v6.port == 81);
  CHECK(v6.target == "/");
  CHECK(coretry::http::parse_url("http://example.com?q=1").target == "/?q=1");
  CHECK(coretry::http::parse_url("http://exa%6Dple.com/").host == "example.com");
}

TEST_CASE("strict URLs: hosts, ports and paths that are not what they seem are refused") {
  for (const char* url : {"http://localhost%00.allowed.example.com:8080/", "http://a%2fb.example.com/",
                          "http://a%20b/", "http://evil.com%23.allowed.example.com/", "http://a..b/", "http://%zz/",
                          "http://host:0/", "http://host:65536/", "http://host:8x/", "http://host:1:2/",
                          "http://[fe80::1%25eth0]/", "http://[::1/", "http:///path", "http:no-authority",
                          "http://:80/"}) {
    CAPTURE(url);
    CHECK_THROWS_AS(coretry::http::parse_url(url), std::invalid_argument);
  }
  CHECK_THROWS_WITH_AS(coretry::http::parse_url("http://localhost%00.allowed.example.com/"),
                       doctest::Contains("not a DNS name"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(coretry::http::parse_url("http://host:99999/"), doctest::Contains("port"),
                       std::invalid_argument);
}

TEST_CASE("strict URLs: url_problem says what parse_url refuses, in the same words") {
  for (const char* url : {"http://host:99999/", "localhost/books", "ftp://host/", "http:///path",
                          "http://localhost%00.example.com/"}) {
    CAPTURE(url);
    const auto problem = coretry::http::url_problem(url);
    REQUIRE(problem);
    CHECK_THROWS_WITH_AS(coretry::http::parse_url(url), ("coretry::http: " + *problem).c_str(), std::invalid_argument);
  }
  CHECK(coretry::http::url_problem("localhost/books")->find("no scheme") != std::string::npos);
  CHECK(coretry::http::url_problem("localhost:8080/books")->find("did you leave out http://") != std::string::npos);
  CHECK(coretry::http::url_problem("ftp://host/")->find("did you leave out") == std::string::npos);
  const auto secret = coretry::http::url_problem("http://user:pa55word@host:0/?api_key=k3y");
  REQUIRE(secret);
  CHECK(secret->find("pa55word") == std::string::npos);
  CHECK(secret->find("k3y") == std::string::npos);
  CHECK_FALSE(coretry::http::url_problem("https://Books.Example.COM:8443/x?y=1#section"));
  CHECK_FALSE(coretry::http::url_problem("http://[::1]:81"));
}

TEST_CASE("strict URLs: a percent-encoded NUL in the host sends nothing") {
  hostile_server server(answers("reached"));
  client_harness h;
  coretry::http::request req(beast_http::verb::get, "", 11);
  const std::string url = "http://localhost%00.allowed.example.com:" + std::to_string(server.port()) + "/";
  CHECK_THROWS_WITH_AS(h.client.async_send(url, req, {}, [](std::exception_ptr, coretry::http::result) {}),
                       doctest::Contains("not a DNS name"), std::invalid_argument);
  h.io.run();
  CHECK(h.client.stats().lookups == 0);
  CHECK(server.connections() == 0);
}

TEST_CASE("strict URLs: the name looked up is the one sent in Host, and a target must begin with '/'") {
  hostile_server server(answers("ok"));
  client_harness h;
  const auto r = h.send(beast_http::verb::get, "http://LocalHost:" + std::to_string(server.port()) + "/a?b=c#frag");
  REQUIRE(r.succeeded());
  CHECK(h.client.stats().lookups == 1);
  const auto seen = server.requests();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].rfind("GET /a?b=c HTTP/1.1\r\n", 0) == 0);
  CHECK(seen[0].find("\r\nHost: localhost:" + std::to_string(server.port()) + "\r\n") != std::string::npos);

  coretry::http::request relative(beast_http::verb::get, "books/1", 11);
  CHECK_THROWS_WITH_AS(h.client.async_send(server.url(), relative, {}, [](std::exception_ptr, coretry::http::result) {}),
                       doctest::Contains("must begin with '/'"), std::invalid_argument);
  CHECK(server.requests().size() == 1);
}

TEST_CASE("the library refuses requests that are not what they say, and sends nothing") {
  hostile_server server(answers("reached"));
  client_harness h;
  const auto refused = [&](coretry::http::request req, const char* named) {
    CAPTURE(named);
    CHECK_THROWS_WITH_AS(h.client.async_send(server.url() + "/x", std::move(req), {},
                                             [](std::exception_ptr, coretry::http::result) {}),
                         doctest::Contains(named), std::invalid_argument);
  };
  coretry::http::request split(beast_http::verb::get, "", 11);
  split.method_string("GET / HTTP/1.1\r\nHost: elsewhere\r\n\r\nGET");
  refused(split, "method");
  coretry::http::request spaced(beast_http::verb::get, "", 11);
  spaced.method_string("GE T");
  refused(spaced, "method");
  coretry::http::request name(beast_http::verb::get, "", 11);
  name.set("X(Bad)\t", "v");
  refused(name, "header name");
  coretry::http::request colon(beast_http::verb::get, "", 11);
  colon.set("X-A: b", "v");
  refused(colon, "header name");
  coretry::http::request nul(beast_http::verb::get, "", 11);
  nul.set("X-Nul", std::string("a\0b", 3));
  refused(nul, "X-Nul");
  coretry::http::request lf(beast_http::verb::get, "", 11);
  lf.set("X-Lf", "a\nInjected: 1");
  refused(lf, "X-Lf");
  coretry::http::request both(beast_http::verb::post, "", 11);
  both.set(beast_http::field::transfer_encoding, "gzip");
  both.body() = "abc";
  refused(both, "both Content-Length and Transfer-Encoding");
  h.io.run();
  h.io.restart();
  CHECK(server.connections() == 0);

  // A custom method that is a token, and a tab inside a value, are fine.
  coretry::http::request custom(beast_http::verb::get, "", 11);
  custom.method_string("PROPFIND");
  custom.set("X-Tabbed", "a\tb");
  coretry::http::request_options options;
  options.policy = hostile_policy();
  std::optional<coretry::http::result> result;
  h.client.async_send(server.url() + "/x", std::move(custom), options,
                      [&](std::exception_ptr, coretry::http::result r) { result = std::move(r); });
  h.io.run();
  REQUIRE(result);
  CHECK(result->succeeded());
  REQUIRE(server.requests().size() == 1);
  CHECK(server.requests()[0].rfind("PROPFIND /x HTTP/1.1\r\n", 0) == 0);
}

TEST_CASE("a decorator that breaks the body's framing is refused before anything is sent") {
  hostile_server server(answers("reached"));
  client_harness h;
  const auto refused = [&](std::function<void(coretry::http::request&)> change, const char* named) {
    CAPTURE(named);
    coretry::http::request_options options;
    options.policy = hostile_policy();
    options.decorate = [change](coretry::http::request& req, const auto&) { change(req); };
    coretry::http::request req(beast_http::verb::put, "", 11);
    req.body() = "abc";
    std::optional<coretry::http::result> result;
    h.client.async_send(server.url() + "/x", std::move(req), options,
                        [&](std::exception_ptr, coretry::http::result r) { result = std::move(r); });
    h.io.run();
    h.io.restart();
    REQUIRE(result);
    CHECK(result->reason == coretry::stop_reason::rejected);
    CHECK(result->attempts == 1);
    REQUIRE(result->value);
    CHECK(result->value->problem.find(named) != std::string::npos);
  };
  // A body grown after its length was set: the rest would be read by the
  // server as another request.
  refused([](coretry::http::request& r) { r.body() += "\r\n\r\nGET /admin HTTP/1.1\r\nHost: x\r\n\r\n"; },
          "Content-Length is not its body's size");
  refused([](coretry::http::request& r) { r.erase(beast_http::field::content_length); },
          "neither Content-Length nor chunked");
  refused([](coretry::http::request& r) { r.insert(beast_http::field::content_length, "3"); },
          "more than one Content-Length");
  refused(
      [](coretry::http::request& r) {
        r.erase(beast_http::field::content_length);
        r.set(beast_http::field::transfer_encoding, "gzip, chunked");
      },
      "not chunked alone");
  CHECK(server.connections() == 0);
}

TEST_CASE("a callback that throws ends the request with its exception, whichever step it runs in") {
  hostile_server server(answers("reached"));
  client_harness h;
  const auto thrown = [&](coretry::http::request_options options, bool reaches_server) {
    options.policy = hostile_policy();
    std::optional<std::exception_ptr> error;
    const std::size_t before = server.requests().size();
    h.client.async_send(server.url() + "/x", coretry::http::request(beast_http::verb::get, "", 11), options,
                        [&](std::exception_ptr e, coretry::http::result) { error = e; });
    h.io.run();
    h.io.restart();
    REQUIRE(error); // the handler ran, once
    REQUIRE(*error);
    CHECK_THROWS_WITH_AS(std::rethrow_exception(*error), "callback", std::runtime_error);
    CHECK(server.requests().size() == before + (reaches_server ? 1 : 0));
    CHECK(h.client.stats().leased == 0);
  };
  coretry::http::request_options decorating;
  decorating.decorate = [](coretry::http::request&, const auto&) { throw std::runtime_error("callback"); };
  thrown(decorating, false);
  coretry::http::request_options validating;
  validating.validate = [](const coretry::http::response&) -> std::optional<std::string> {
    throw std::runtime_error("callback");
  };
  thrown(validating, true);
  coretry::http::request_options streaming;
  streaming.stream_body = [](const auto&) { return true; };
  streaming.body_sink = [](std::string_view) -> boost::system::error_code { throw std::runtime_error("callback"); };
  thrown(streaming, true);

  // A system_error is the attempt's error, as an I/O failure's is, not an
  // exception for the caller.
  coretry::http::request_options reporting;
  reporting.policy = hostile_policy();
  reporting.validate = [](const coretry::http::response&) -> std::optional<std::string> {
    throw boost::system::system_error(boost::asio::error::no_permission);
  };
  std::optional<std::exception_ptr> error;
  std::optional<coretry::http::result> result;
  h.client.async_send(server.url() + "/x", coretry::http::request(beast_http::verb::get, "", 11), reporting,
                      [&](std::exception_ptr e, coretry::http::result r) {
                        error = e;
                        result = std::move(r);
                      });
  h.io.run();
  h.io.restart();
  REQUIRE(error);
  CHECK_FALSE(*error);
  REQUIRE(result);
  REQUIRE(result->value);
  CHECK(result->value->error == boost::asio::error::no_permission);
}

TEST_CASE("userinfo in a URL is sent as Basic authorization to that origin, never in Host") {
  hostile_server server(answers("ok"));
  client_harness h;
  const std::string port = std::to_string(server.port());
  const auto r = h.send(beast_http::verb::get, "http://Aladdin:open%20sesame@127.0.0.1:" + port + "/private");
  REQUIRE(r.succeeded());
  const auto seen = server.requests();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].find("\r\nAuthorization: Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==\r\n") != std::string::npos);
  CHECK(seen[0].find("\r\nHost: 127.0.0.1:" + port + "\r\n") != std::string::npos);
  CHECK(seen[0].find("Aladdin") == std::string::npos);

  // A caller's own Authorization wins over the URL's.
  coretry::http::request own(beast_http::verb::get, "", 11);
  own.set(beast_http::field::authorization, "Bearer t0ken");
  coretry::http::request_options options;
  options.policy = hostile_policy();
  std::optional<coretry::http::result> result;
  h.client.async_send("http://user:pass@127.0.0.1:" + port + "/own", std::move(own), options,
                      [&](std::exception_ptr, coretry::http::result res) { result = std::move(res); });
  h.io.run();
  REQUIRE(result);
  REQUIRE(server.requests().size() == 2);
  CHECK(server.requests()[1].find("\r\nAuthorization: Bearer t0ken\r\n") != std::string::npos);
  CHECK(server.requests()[1].find("Basic") == std::string::npos);
}
