// Teardown with requests waiting for a pooled connection, while one request
// holds the origin's only connection to a server that never answers and the
// others wait in the pool: the client destroyed (before its context, as its
// documentation asks) then the io_context; the io_context destroyed while
// the client still lives, then the client; requests awaited by coroutines
// on a strand. Every request is destroyed unrun with its context; nothing is
// used after it is freed (asan) and nothing is kept alive (a waiter holds its
// attempt, which holds the client's state, which holds the pool): every
// handler is destroyed, and the asan preset's leak detection finds no block
// left at exit.

#include "loopback_listener.hpp"

#include <coretry/http/client.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using namespace std::chrono_literals;

namespace {

struct teardown_run {
  int ran = 0;                  ///< handlers that ran
  long handlers_left = 0;       ///< handlers neither run nor destroyed
  std::size_t were_waiting = 0; ///< requests waiting in the pool before the teardown
};

/// How the requests are made and what is destroyed first.
struct teardown_way {
  bool context_first = false; ///< the io_context destroyed before the client
  bool coroutines = false;    ///< each request awaited by a coroutine on a strand
};

/// `requests` GETs to a server that accepts (the kernel does) and never
/// answers, one connection per origin; the context runs until all but the
/// first wait for the connection, then the client and the context are
/// destroyed in the order `way` says.
teardown_run tear_down_with_waiters(int requests, teardown_way way = {}) {
  coretry::test::loopback_listener silent;
  const std::string url = "http://127.0.0.1:" + std::to_string(silent.port()) + "/never";
  teardown_run out;
  auto token = std::make_shared<int>(0); // one copy per live handler
  {
    auto io = std::make_unique<asio::io_context>();
    coretry::http::client_options options;
    options.max_connections_per_origin = 1;
    auto client = std::make_unique<coretry::http::client>(io->get_executor(), options);
    for (int i = 0; i < requests; ++i) {
      if (way.coroutines) {
        asio::co_spawn(
            asio::make_strand(*io),
            [&client, &out, &url, token]() -> asio::awaitable<void> {
              co_await client->async_send(url, coretry::http::request(beast_http::verb::get, "", 11), {},
                                          asio::use_awaitable);
              ++out.ran;
            },
            asio::detached);
        continue;
      }
      client->async_send(url, coretry::http::request(beast_http::verb::get, "", 11), {},
                         [&out, token](std::exception_ptr, coretry::http::result) { ++out.ran; });
    }
    // Until every request but the first waits for the connection (at most
    // 100 ms: well inside the attempts' 250 ms).
    for (int slice = 0; slice < 50 && client->stats().waiting + 1 < static_cast<std::size_t>(requests); ++slice)
      io->run_for(2ms);
    io->run_for(2ms);
    out.were_waiting = client->stats().waiting;
    if (way.context_first) {
      io.reset();
      client.reset();
    } else {
      client.reset();
      io.reset();
    }
  }
  out.handlers_left = token.use_count() - 1;
  return out;
}

} // namespace

TEST_CASE("teardown: requests waiting for a pooled connection, the client then its io_context destroyed") {
  for (const int requests : {1, 2, 3, 64}) {
    CAPTURE(requests);
    const teardown_run run = tear_down_with_waiters(requests);
    CHECK(run.were_waiting == static_cast<std::size_t>(requests - 1));
    CHECK(run.ran == 0);
    CHECK(run.handlers_left == 0);
  }
}

TEST_CASE("teardown: the io_context destroyed while the client lives and requests wait for a pooled connection") {
  for (const int requests : {2, 64}) {
    CAPTURE(requests);
    const teardown_run run = tear_down_with_waiters(requests, {.context_first = true});
    CHECK(run.were_waiting == static_cast<std::size_t>(requests - 1));
    CHECK(run.ran == 0);
    CHECK(run.handlers_left == 0);
  }
}

TEST_CASE("teardown: coroutines on strands awaiting requests that wait for a pooled connection") {
  for (const bool context_first : {false, true}) {
    CAPTURE(context_first);
    const teardown_run run = tear_down_with_waiters(3, {.context_first = context_first, .coroutines = true});
    CHECK(run.were_waiting == 2);
    CHECK(run.ran == 0);
    CHECK(run.handlers_left == 0);
  }
}
