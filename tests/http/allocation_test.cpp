// What a request through the client takes from the allocator: on a
// kept-alive connection, with a caller that names no allocator, at most 12
// blocks per request on the caller's thread (the hand-written Beast client
// of bench_http_client takes 9 for the same exchange).
//
// Every block is counted (tests/bench/heap_hooks.hpp replaces malloc and its
// kin), so this file is an executable of its own, built without the
// sanitizers, which replace the allocator themselves.

#include <coretry/http/client.hpp>
#include <faults/fault_server.hpp>

#include "heap_hooks.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <thread>

namespace {
// Blocks taken by this thread: the server's thread is not counted.
thread_local std::uint64_t blocks_taken = 0;
} // namespace

void heap_hooks::taken(std::size_t) noexcept { ++blocks_taken; }
void heap_hooks::given_back(std::size_t) noexcept {}

namespace {

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;

/// Blocks per request over `requests` keep-alive GETs of `url`, after as
/// many to warm the connection and the caches.
double blocks_per_request(const std::string& url, int requests) {
  asio::io_context io(1);
  double per_request = -1;
  int failures = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        coretry::http::client client(io.get_executor());
        coretry::http::request_options options;
        options.route = "/status/{code}";
        auto one = [&]() -> asio::awaitable<void> {
          coretry::http::request req(beast_http::verb::get, "", 11);
          auto result = co_await client.async_send(url, std::move(req), options, asio::use_awaitable);
          if (!result.succeeded()) ++failures;
        };
        for (int i = 0; i < requests; ++i) co_await one();
        const std::uint64_t before = blocks_taken;
        for (int i = 0; i < requests; ++i) co_await one();
        per_request = double(blocks_taken - before) / requests;
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  io.run();
  CHECK(failures == 0);
  return per_request;
}

} // namespace

TEST_CASE("a kept-alive GET through the client takes at most 12 blocks from the allocator") {
  asio::io_context server_io(1);
  auto guard = asio::make_work_guard(server_io);
  coretry::faults::fault_server server(server_io);
  std::thread server_thread([&] { server_io.run(); });
  const double blocks = blocks_per_request(server.base_url() + "/status/200", 200);
  server.stop();
  guard.reset();
  server_thread.join();
  MESSAGE("blocks per request: " << blocks);
  CHECK(blocks > 0);
  CHECK(blocks <= 12.0);
}
