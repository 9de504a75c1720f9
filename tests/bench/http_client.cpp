// Loopback keep-alive GETs against a local server: the coretry HTTP client
// versus a hand-written Beast coroutine client doing the same exchange on one
// kept-alive connection, interleaved in rounds so both see the same machine.
// Reports requests per second and client-thread CPU per request.
//
//   bench_http_client [requests-per-round=5000] [rounds=5] [only=raw|deadline|coretry]
//
// `only` runs one client alone, for profiling it (strace -c, perf).

#include <coretry/http/client.hpp>
#include <faults/fault_server.hpp>

#include "heap_hooks.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <ctime>
#include <thread>

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;

namespace {
// Heap blocks taken by the measuring thread (the server's thread, in the same
// process, is not counted), every one of them: see heap_hooks.hpp.
thread_local std::uint64_t thread_allocations = 0;
} // namespace

void heap_hooks::taken(std::size_t) noexcept { ++thread_allocations; }
void heap_hooks::given_back(std::size_t) noexcept {}

namespace {

double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

struct measurement {
  double requests_per_second;
  double cpu_us_per_request;
  double allocations_per_request;
};

template <class Loop>
measurement measure(int requests, Loop loop) {
  asio::io_context io(1);
  const std::uint64_t allocations_before = thread_allocations;
  const double cpu_before = thread_cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  asio::co_spawn(io, loop(io), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  io.run();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {requests / seconds, (thread_cpu_seconds() - cpu_before) * 1e6 / requests,
          double(thread_allocations - allocations_before) / requests};
}

measurement raw_beast(int requests, unsigned short port) {
  return measure(requests, [&](asio::io_context& io) -> asio::awaitable<void> {
    asio::ip::tcp::socket socket(io);
    co_await socket.async_connect({asio::ip::make_address("127.0.0.1"), port}, asio::use_awaitable);
    socket.set_option(asio::ip::tcp::no_delay(true));
    boost::beast::flat_buffer buffer;
    for (int i = 0; i < requests; ++i) {
      beast_http::request<beast_http::string_body> req(beast_http::verb::get, "/status/200", 11);
      req.set(beast_http::field::host, "127.0.0.1");
      co_await beast_http::async_write(socket, req, asio::use_awaitable);
      beast_http::response<beast_http::string_body> res;
      co_await beast_http::async_read(socket, buffer, res, asio::use_awaitable);
      if (res.result_int() != 200) std::abort();
    }
  });
}

// The same exchange with a deadline on each request, the way Beast's own
// examples bound an exchange: tcp_stream::expires_after before the write.
measurement raw_beast_with_deadline(int requests, unsigned short port) {
  return measure(requests, [&](asio::io_context& io) -> asio::awaitable<void> {
    boost::beast::tcp_stream stream(io);
    co_await stream.async_connect(asio::ip::tcp::endpoint{asio::ip::make_address("127.0.0.1"), port},
                                  asio::use_awaitable);
    stream.socket().set_option(asio::ip::tcp::no_delay(true));
    boost::beast::flat_buffer buffer;
    for (int i = 0; i < requests; ++i) {
      beast_http::request<beast_http::string_body> req(beast_http::verb::get, "/status/200", 11);
      req.set(beast_http::field::host, "127.0.0.1");
      stream.expires_after(std::chrono::milliseconds(250));
      co_await beast_http::async_write(stream, req, asio::use_awaitable);
      beast_http::response<beast_http::string_body> res;
      co_await beast_http::async_read(stream, buffer, res, asio::use_awaitable);
      if (res.result_int() != 200) std::abort();
    }
  });
}

measurement through_coretry(int requests, const std::string& url) {
  return measure(requests, [&](asio::io_context& io) -> asio::awaitable<void> {
    coretry::http::client client(io.get_executor());
    coretry::http::request_options options;
    options.route = "/status/{code}";
    for (int i = 0; i < requests; ++i) {
      coretry::http::request req(beast_http::verb::get, "", 11);
      auto result = co_await client.async_send(url, std::move(req), options, asio::use_awaitable);
      if (!result.succeeded()) std::abort();
    }
  });
}

} // namespace

int main(int argc, char** argv) {
  const int requests = argc > 1 ? std::atoi(argv[1]) : 5000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  const std::string only = argc > 3 ? argv[3] : "";
  if (requests <= 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: bench_http_client [requests-per-round>0] [rounds>0]\n");
    return 2;
  }
  asio::io_context server_io(1);
  auto guard = asio::make_work_guard(server_io);
  coretry::faults::fault_server server(server_io);
  std::thread server_thread([&] { server_io.run(); });
  const std::string url = server.base_url() + "/status/200";

  if (!only.empty()) {
    if (only != "raw" && only != "deadline" && only != "coretry") {
      std::fprintf(stderr, "only must be raw, deadline or coretry\n");
      return 2;
    }
    const measurement m = only == "raw"        ? raw_beast(requests, server.port())
                          : only == "deadline" ? raw_beast_with_deadline(requests, server.port())
                                               : through_coretry(requests, url);
    std::printf("%s: %.0f requests/s  %.1f us client CPU/request  %.1f allocations/request\n", only.c_str(),
                m.requests_per_second, m.cpu_us_per_request, m.allocations_per_request);
  } else {
  raw_beast(requests / 10, server.port()); // warm up
  raw_beast_with_deadline(requests / 10, server.port());
  through_coretry(requests / 10, url);
  measurement raw{}, bounded{}, ours{};
  auto add = [rounds](measurement& sum, const measurement& m) {
    sum.requests_per_second += m.requests_per_second / rounds;
    sum.cpu_us_per_request += m.cpu_us_per_request / rounds;
    sum.allocations_per_request += m.allocations_per_request / rounds;
  };
  for (int r = 0; r < rounds; ++r) {
    add(raw, raw_beast(requests, server.port()));
    add(bounded, raw_beast_with_deadline(requests, server.port()));
    add(ours, through_coretry(requests, url));
  }
  std::printf("loopback keep-alive GET, %d requests x %d interleaved rounds (mean of rounds):\n", requests, rounds);
  auto row = [](const char* name, const measurement& m) {
    std::printf("  %-42s %9.0f requests/s  %6.1f us client CPU/request  %5.1f allocations/request\n", name,
                m.requests_per_second, m.cpu_us_per_request, m.allocations_per_request);
  };
  row("hand-written Beast client, no deadline:", raw);
  row("hand-written Beast client, with deadline:", bounded);
  row("coretry::http::client:", ours);
  std::printf("  coretry throughput: %.1f%% of the hand-written client's without a deadline, %.1f%% with one\n",
              100.0 * ours.requests_per_second / raw.requests_per_second,
              100.0 * ours.requests_per_second / bounded.requests_per_second);
  }
  server.stop();
  guard.reset();
  server_thread.join();
  return 0;
}
