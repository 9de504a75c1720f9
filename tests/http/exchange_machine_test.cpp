// The rules of one exchange (lib/src/http/exchange_machine.hpp) on byte
// strings alone: what is written, what the answer's bytes make of the
// exchange, whether the connection is kept, and when a reused connection's
// end means "try a fresh one" rather than "outcome unknown". No sockets.

#include "exchange_machine.hpp"

#include <coretry/http/client_error.hpp>

#include <boost/asio/error.hpp>
#include <boost/beast/http/error.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace exchange_machine_cases {

namespace beast_http = boost::beast::http;
using coretry::http::exchange;
using coretry::http::request;
using coretry::http::stage;
using coretry::http::detail::exchange_action;
using coretry::http::detail::exchange_machine;
using coretry::http::detail::exchange_rules;
using kind = exchange_action::kind;
using boost::system::error_code;

constexpr std::uint32_t header_limit = 1024;
constexpr std::uint32_t line_limit = 256;

exchange_rules small_rules() {
  exchange_rules rules;
  rules.header_limit = header_limit;
  rules.body_limit = 4096;
  rules.max_interim = 2;
  rules.repeatable = true;
  rules.added = {"/", "example.test", "coretry-test"};
  return rules;
}

/// One exchange on a connection that exists only as its buffers: the
/// machine's actions are done here, the server's answer is a string.
struct bench {
  exchange_rules rules = small_rules();
  request req{beast_http::verb::get, "/items", 11};
  exchange x;
  boost::beast::flat_buffer buffer;
  std::string head;
  std::optional<exchange_machine> machine;
  exchange_action next;
  std::string sent; ///< every byte asked to be written
  int first_bytes = 0; ///< events that brought an answer's first byte
  bool completed = false;

  bench() { buffer.max_size(std::size_t{header_limit} + line_limit); }

  /// Starts (again, after retry_fresh) on a connection, fresh or `reused`.
  void start(bool reused = false) {
    if (!machine) machine.emplace(rules, x);
    take(machine->start(req, buffer, head, reused));
    REQUIRE(next.next == kind::write);
    sent.clear();
    for (const auto& piece : next.out) sent.append(static_cast<const char*>(piece.data()), piece.size());
  }

  void take(const exchange_action& a) {
    next = a;
    if (a.answered) ++first_bytes;
    completed = completed || a.complete;
  }

  void written() { take(machine->written({}, sent.size())); }

  /// Serves `answer` in reads of at most `step` bytes while the machine
  /// asks for them, then (`then_close`) ends the stream.
  void serve(std::string_view answer, std::size_t step, bool then_close = true) {
    while (next.next == kind::read && !answer.empty()) {
      const std::size_t n = std::min({step, answer.size(), next.in.size()});
      REQUIRE(n != 0);
      std::memcpy(next.in.data(), answer.data(), n);
      answer.remove_prefix(n);
      take(machine->read({}, n));
    }
    if (then_close && next.next == kind::read) take(machine->read(boost::asio::error::eof, 0));
  }

  /// The whole exchange on a fresh connection: the answer in reads of at
  /// most `step` bytes, the connection given back or closed; what was done
  /// with the connection.
  kind exchange_with(std::string_view answer, std::size_t step = 4096, bool then_close = true) {
    start();
    written();
    serve(answer, step, then_close);
    return release();
  }

  kind release() {
    const kind what = next.next;
    if (what == kind::keep_connection || what == kind::close_connection) {
      take(machine->released());
      CHECK(next.next == kind::done);
    }
    return what;
  }

  unsigned status() const { return x.res ? x.res->result_int() : 0; }
};

constexpr std::string_view hello = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

TEST_CASE("exchange: the head written, a response read, the connection kept") {
  bench b;
  CHECK(b.exchange_with(hello) == kind::keep_connection);
  CHECK(b.sent.starts_with("GET /items HTTP/1.1\r\nHost: example.test\r\n"));
  CHECK(b.sent.find("User-Agent: coretry-test\r\n") != std::string::npos);
  CHECK(b.sent.ends_with("\r\n\r\n"));
  CHECK(b.x.bytes_written == b.sent.size());
  CHECK(b.status() == 200);
  CHECK(b.x.res->body() == "hello");
  CHECK(!b.x.error);
  CHECK(b.x.reached == stage::complete);
  CHECK(b.first_bytes == 1);
  CHECK(b.completed);
}

TEST_CASE("exchange: interim responses (100 Continue, 103 Early Hints) skipped before the final one") {
  const std::string answer = "HTTP/1.1 100 Continue\r\n\r\n"
                             "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n" +
                             std::string(hello);
  bench b;
  CHECK(b.exchange_with(answer) == kind::keep_connection);
  CHECK(b.status() == 200);
  CHECK(b.x.res->body() == "hello");
  CHECK(b.x.res->find("Link") == b.x.res->end()); // the interim's fields are not the answer's
  CHECK(b.first_bytes == 1);

  SUBCASE("more of them than allowed: refused, the connection closed") {
    bench more;
    const std::string three = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"
                              "HTTP/1.1 100 Continue\r\n\r\n" + std::string(hello);
    CHECK(more.exchange_with(three) == kind::close_connection);
    CHECK(more.x.error == coretry::http::response_error::too_many_interim_responses);
    CHECK(!more.x.res);
  }
  SUBCASE("101 Switching Protocols is final: the connection is not reused") {
    bench up;
    CHECK(up.exchange_with("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
                           4096, false) == kind::close_connection);
    CHECK(up.status() == 101);
    CHECK(!up.x.error);
  }
}

TEST_CASE("exchange: a response split at every byte reads the same") {
  const std::string answer = "HTTP/1.1 100 Continue\r\n\r\n"
                             "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Kind: split\r\n\r\n"
                             "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer-Field: t\r\n\r\n";
  for (std::size_t cut = 0; cut <= answer.size(); ++cut) {
    CAPTURE(cut);
    bench b;
    b.start();
    b.written();
    b.serve(answer.substr(0, cut), answer.size(), false);
    b.serve(answer.substr(cut), answer.size(), false);
    REQUIRE(b.release() == kind::keep_connection);
    CHECK(b.status() == 200);
    CHECK(b.x.res->body() == "hello world");
    CHECK((*b.x.res)["X-Kind"] == "split");
    CHECK(b.first_bytes == 1);
  }
  bench byte_by_byte;
  CHECK(byte_by_byte.exchange_with(answer, 1, false) == kind::keep_connection);
  CHECK(byte_by_byte.x.res->body() == "hello world");
}

TEST_CASE("exchange: a reused connection the server had closed") {
  SUBCASE("closed before any byte of answer: tried once more, on a fresh connection") {
    bench b;
    b.start(true);
    b.written();
    b.take(b.machine->read(boost::asio::error::eof, 0));
    CHECK(b.next.next == kind::retry_fresh);
    // The driver starts again on another connection, not reused this time:
    // its end before an answer is a failure, not another retry.
    b.x = exchange{};
    b.start(false);
    b.written();
    b.take(b.machine->read(boost::asio::error::eof, 0));
    CHECK(b.release() == kind::close_connection);
    CHECK(b.x.error == beast_http::error::end_of_stream);
    CHECK(b.x.reached == stage::reading);
  }
  SUBCASE("reset while the request was written: tried on a fresh connection") {
    bench b;
    b.start(true);
    b.take(b.machine->written(boost::asio::error::broken_pipe, 0));
    CHECK(b.next.next == kind::retry_fresh);
  }
  SUBCASE("closed after bytes of the answer arrived: a failure, the outcome unknown") {
    bench b;
    b.start(true);
    b.written();
    b.serve("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhe", 4096);
    CHECK(b.release() == kind::close_connection);
    CHECK(b.x.error == beast_http::error::partial_message);
    CHECK(b.x.reached == stage::reading);
    CHECK(!b.x.res);
  }
  SUBCASE("reset after an interim response arrived: a failure, the outcome unknown") {
    bench b;
    b.start(true);
    b.written();
    b.serve("HTTP/1.1 100 Continue\r\n\r\n", 4096, false);
    b.take(b.machine->read(boost::asio::error::connection_reset, 0));
    CHECK(b.release() == kind::close_connection);
    CHECK(b.x.error == boost::asio::error::connection_reset);
    CHECK(b.x.reached == stage::reading);
  }
  SUBCASE("a request that may not be repeated is not tried again") {
    bench b;
    b.rules.repeatable = false;
    b.start(true);
    b.written();
    b.take(b.machine->read(boost::asio::error::connection_reset, 0));
    CHECK(b.release() == kind::close_connection);
    CHECK(b.x.error == boost::asio::error::connection_reset);
  }
  SUBCASE("a cancelled attempt is not tried again") {
    bench b;
    b.start(true);
    b.take(b.machine->failed(boost::asio::error::operation_aborted));
    CHECK(b.release() == kind::close_connection);
    CHECK(b.x.error == boost::asio::error::operation_aborted);
    CHECK(b.x.reached == stage::writing);
  }
}

TEST_CASE("exchange: keep-alive, Connection: close and HTTP/1.0") {
  SUBCASE("the server asks to close") {
    bench b;
    CHECK(b.exchange_with("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 4096, false) ==
          kind::close_connection);
    CHECK(b.status() == 200);
    CHECK(!b.x.error);
  }
  SUBCASE("the request asked to close") {
    bench b;
    b.req.keep_alive(false);
    CHECK(b.exchange_with(hello, 4096, false) == kind::close_connection);
    CHECK(b.sent.find("Connection: close\r\n") != std::string::npos);
    CHECK(b.status() == 200);
  }
  SUBCASE("HTTP/1.0 closes unless it says keep-alive") {
    bench plain;
    CHECK(plain.exchange_with("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 4096, false) ==
          kind::close_connection);
    CHECK(plain.status() == 200);
    bench kept;
    CHECK(kept.exchange_with("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", 4096,
                             false) == kind::keep_connection);
  }
  SUBCASE("a body delimited by the connection's end") {
    bench b;
    CHECK(b.exchange_with("HTTP/1.0 200 OK\r\n\r\nuntil the end", 4) == kind::close_connection);
    CHECK(!b.x.error);
    CHECK(b.x.res->body() == "until the end");
  }
  SUBCASE("bytes beyond the response: not read as the next answer") {
    bench b;
    CHECK(b.exchange_with(std::string(hello) + "HTTP/1.1 200 OK\r\n", 4096, false) == kind::close_connection);
    CHECK(b.status() == 200);
  }
  SUBCASE("a HEAD response announces a body it does not send") {
    bench b;
    b.req.method(beast_http::verb::head);
    CHECK(b.exchange_with("HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n", 4096, false) == kind::keep_connection);
    CHECK(b.status() == 200);
  }
}

TEST_CASE("exchange: bounds of the head and the body") {
  SUBCASE("a head over header_limit") {
    bench b;
    const std::string big = "HTTP/1.1 200 OK\r\nX-Big: " + std::string(header_limit, 'a') + "\r\n\r\n";
    CHECK(b.exchange_with(big, 100) == kind::close_connection);
    CHECK(b.x.error == beast_http::error::header_limit);
    CHECK(!b.x.res);
  }
  SUBCASE("an announced body over body_limit") {
    bench b;
    b.rules.body_limit = 4;
    CHECK(b.exchange_with(hello) == kind::close_connection);
    CHECK(b.x.error == beast_http::error::body_limit);
  }
  SUBCASE("a chunked body over body_limit") {
    bench b;
    b.rules.body_limit = 8;
    CHECK(b.exchange_with("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n") ==
          kind::close_connection);
    CHECK(b.x.error == beast_http::error::body_limit);
  }
  SUBCASE("a chunk line that fills the read buffer") {
    bench b;
    const std::string long_line =
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;" + std::string(header_limit + line_limit, 'e');
    CHECK(b.exchange_with(long_line, 64) == kind::close_connection);
    CHECK(b.x.error == coretry::http::response_error::line_too_long);
  }
}

TEST_CASE("exchange: the caller's validation of a 2xx, once the connection is given back") {
  const std::function<std::optional<std::string>(const coretry::http::response&)> validate =
      [](const coretry::http::response& res) -> std::optional<std::string> {
    if (res.body() != "hello") return "unexpected body";
    return std::nullopt;
  };
  bench wrong;
  wrong.rules.validate = &validate;
  CHECK(wrong.exchange_with("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbye") == kind::keep_connection);
  CHECK(wrong.x.problem == "unexpected body");
  bench right;
  right.rules.validate = &validate;
  CHECK(right.exchange_with(hello) == kind::keep_connection);
  CHECK(right.x.problem.empty());
  bench not_found;
  not_found.rules.validate = &validate;
  CHECK(not_found.exchange_with("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n") == kind::keep_connection);
  CHECK(not_found.x.problem.empty());
}

} // namespace exchange_machine_cases
