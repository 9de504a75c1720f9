// streaming_download: a body far larger than memory should hold, straight to a file.
//
// By default the HTTP client keeps a response body in memory, up to
// client_options::body_limit (8 MiB). For a download, request_options::
// stream_body picks, from each final response's header, the bodies that go
// piece by piece to request_options::body_sink as they are read instead: the
// client then holds no more than its read buffer, whatever the size.
//
// The sink writes to a file. A retried attempt starts its body over, so
// stream_body, called with the header of each attempt's response, (re)opens
// the file from its start; it streams only a 200 (the 503's few bytes stay in
// memory, where the classifier can read them).
//
// The program serves 32 MiB on loopback after one 503, downloads them to a
// temporary file and checks every byte, that the process's peak memory grew
// by far less than the body, and that the same download held in memory fails
// on the body limit instead. Exit status 0 when all of that holds.

#include "loopback_server.hpp"
#include "story.hpp"

#include <coretry/http/client.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;

namespace {

constexpr std::uint64_t body_size = 32ull * 1024 * 1024;
constexpr std::size_t block_size = 64 * 1024;

/// The byte at `offset` of the served body: a pattern a truncation, a
/// duplication or a reordering would break.
char byte_at(std::uint64_t offset) { return static_cast<char>(offset % 251); }

/// The export service: 503 on the first call, then the body, written in
/// blocks from a fixed buffer.
struct export_service {
  int calls = 0;

  asio::awaitable<bool> handle(asio::ip::tcp::socket& socket, const beast_http::request<beast_http::string_body>&) {
    boost::system::error_code ec;
    if (++calls == 1) {
      std::tie(ec, std::ignore) = co_await asio::async_write(
          socket, asio::buffer(std::string_view("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy")),
          asio::as_tuple(asio::use_awaitable));
      co_return !ec;
    }
    const std::string header = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: " +
                               std::to_string(body_size) + "\r\n\r\n";
    std::tie(ec, std::ignore) =
        co_await asio::async_write(socket, asio::buffer(header), asio::as_tuple(asio::use_awaitable));
    std::string block(block_size, '\0');
    for (std::uint64_t sent = 0; !ec && sent < body_size; sent += block.size()) {
      for (std::size_t i = 0; i < block.size(); ++i) block[i] = byte_at(sent + i);
      std::tie(ec, std::ignore) =
          co_await asio::async_write(socket, asio::buffer(block), asio::as_tuple(asio::use_awaitable));
    }
    co_return !ec;
  }
};

/// The process's peak resident memory (VmHWM), in KiB; 0 if unknown.
std::uint64_t peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6));
  return 0;
}

/// Writes each piece at the end of the file and checks it against the pattern.
struct file_sink {
  explicit file_sink(std::filesystem::path where) : path(std::move(where)) {}

  std::filesystem::path path;
  std::ofstream out;
  std::uint64_t written = 0;
  std::uint64_t wrong_bytes = 0;
  unsigned starts = 0;

  bool start(const beast_http::response_header<>& header) {
    if (header.result() != beast_http::status::ok) return false; // kept in memory, as usual
    ++starts;
    out.close();
    out.open(path, std::ios::binary | std::ios::trunc); // a retried body starts over
    written = 0;
    wrong_bytes = 0;
    return out.is_open();
  }

  boost::system::error_code write(std::string_view piece) {
    for (std::size_t i = 0; i < piece.size(); ++i)
      if (piece[i] != byte_at(written + i)) ++wrong_bytes;
    if (!out.write(piece.data(), static_cast<std::streamsize>(piece.size())))
      return std::make_error_code(std::errc::io_error); // ends the attempt (permanent)
    written += piece.size();
    return {};
  }
};

} // namespace

int main() {
  asio::io_context io;
  export_service service;
  examples::loopback_server server(io, [&](auto& socket, const auto& req) { return service.handle(socket, req); });
  coretry::http::client client(io.get_executor());

  file_sink sink(std::filesystem::temp_directory_path() /
                 ("coretry-streaming-download-" + std::to_string(::getpid()) + ".bin"));
  coretry::http::request_options streamed;
  streamed.route = "/export";
  streamed.policy.overall_deadline = std::chrono::seconds(30); // a large body takes time
  streamed.policy.attempt_limit = std::chrono::seconds(20);
  streamed.stream_body = [&](const beast_http::response_header<>& header) { return sink.start(header); };
  streamed.body_sink = [&](std::string_view piece) { return sink.write(piece); };

  examples::story story;

  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const std::uint64_t peak_before = peak_rss_kib();
        auto r = co_await client.async_send(server.url("/export"), coretry::http::request{beast_http::verb::get, "", 11},
                                            streamed, asio::use_awaitable);
        sink.out.close();
        const std::uint64_t peak_after = peak_rss_kib();
        std::printf("GET /export: %s after %u attempt(s), %llu bytes to %s, peak memory +%llu KiB\n",
                    std::string(coretry::to_string(r.reason)).c_str(), r.attempts,
                    static_cast<unsigned long long>(sink.written), sink.path.c_str(),
                    static_cast<unsigned long long>(peak_after - peak_before));
        story.expect(r.succeeded() && r.attempts == 2 && sink.starts == 1, "the 503 was retried, and only the 200 streamed");
        story.expect(sink.written == body_size && std::filesystem::file_size(sink.path) == body_size &&
                   sink.wrong_bytes == 0,
               "every byte arrived in the file, in order");
        story.expect(r.value && r.value->res && r.value->res->body().empty(), "nothing of the body was kept in memory");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
        std::printf("  (peak memory not judged: the sanitizer's runtime keeps freed memory for itself)\n");
#else
        story.expect(peak_before != 0 && peak_after - peak_before < 16 * 1024, "peak memory grew by less than 16 MiB");
#endif
        std::filesystem::remove(sink.path);

        coretry::http::request_options in_memory;
        in_memory.route = "/export";
        in_memory.policy = streamed.policy;
        auto held = co_await client.async_send(server.url("/export"),
                                               coretry::http::request{beast_http::verb::get, "", 11}, in_memory,
                                               asio::use_awaitable);
        std::printf("GET /export held in memory: %s (%s)\n", std::string(coretry::to_string(held.reason)).c_str(),
                    held.value ? held.value->error.message().c_str() : "");
        story.expect(held.reason == coretry::stop_reason::rejected && held.value &&
                   held.value->error == beast_http::error::body_limit,
               "without streaming the same body fails on the 8 MiB body limit");

        client.close_idle();
        server.stop();
      },
      story.on_end());
  io.run();
  std::error_code ignored;
  std::filesystem::remove(sink.path, ignored);
  return story.exit_status();
}
