// Fuzzes the client's bounded response reading with arbitrary server bytes:
// the same steps as its read loop (lib/src/http/response_reading.hpp), fed
// through a read buffer with the client's maximum size, in reads of varying
// size, interim responses counted against their bound. Checked: the buffer
// never holds more than its bound, a body never exceeds the body limit, a
// full buffer after the header is response_line_too_long, no more interim
// responses are skipped than allowed, and every read makes progress.
//
// The first input byte chooses the size of each read (1 to 256 bytes), so
// that lines split across reads are explored too.

#include "fuzz_check.hpp"

#include "../../lib/src/http/response_reading.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace {

using namespace coretry_fuzz;
namespace beast_http = boost::beast::http;

// Small limits, so that inputs of a few KiB reach every one of them.
constexpr std::uint32_t header_limit = 1024;
constexpr std::uint32_t line_limit = 256;
constexpr std::uint64_t body_limit = 4096;
constexpr unsigned max_interim = 8;

enum class ending { complete, error, eof };

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  current_input = std::string_view(reinterpret_cast<const char*>(data), size);
  if (size == 0) return 0;
  const std::size_t read_limit = 1 + data[0];
  std::string_view rest = current_input.substr(1);

  boost::beast::flat_buffer buffer;
  buffer.max_size(std::size_t{header_limit} + line_limit);
  ending end = ending::complete;
  boost::system::error_code error;
  unsigned interim_seen = 0;
  for (unsigned interim = 0;; ++interim) {
    if (interim > max_interim) {
      error = coretry::http::response_error::too_many_interim_responses;
      end = ending::error;
      break;
    }
    beast_http::response_parser<beast_http::string_body> parser;
    parser.header_limit(header_limit);
    parser.body_limit(body_limit);
    for (;;) {
      error = coretry::http::detail::parse_buffered(buffer, parser);
      FUZZ_CHECK(buffer.size() <= buffer.max_size());
      if (error || parser.is_done()) break;
      const std::size_t room = coretry::http::detail::next_read_size(buffer);
      if (room == 0) {
        error = coretry::http::detail::full_buffer_error(parser);
        FUZZ_CHECK(buffer.size() == buffer.max_size());
        break;
      }
      if (rest.empty()) {
        // The server closed: that ends a body delimited by the connection.
        if (parser.got_some()) parser.put_eof(error);
        else error = beast_http::error::end_of_stream;
        end = ending::eof;
        break;
      }
      const std::size_t n = std::min({room, read_limit, rest.size()});
      const auto space = buffer.prepare(n);
      FUZZ_CHECK(boost::asio::buffer_size(space) == n);
      std::memcpy(space.data(), rest.data(), n);
      buffer.commit(n);
      rest.remove_prefix(n);
      FUZZ_CHECK(buffer.size() <= buffer.max_size());
      FUZZ_CHECK(buffer.capacity() <= buffer.max_size());
    }
    if (error == coretry::http::response_error::line_too_long) FUZZ_CHECK(parser.is_header_done());
    if (error) {
      end = ending::error;
      break;
    }
    if (!parser.is_done()) break;
    FUZZ_CHECK(parser.get().body().size() <= body_limit);
    if (!coretry::http::detail::is_interim(parser.get().result_int())) break;
    ++interim_seen;
  }
  // The interim response that goes over the bound is read, then refused:
  // a final response is accepted only after at most max_interim of them.
  FUZZ_CHECK(interim_seen <= max_interim + 1);
  if (interim_seen == max_interim + 1) FUZZ_CHECK(error == coretry::http::response_error::too_many_interim_responses);
  if (end == ending::error) FUZZ_CHECK(error);
  return 0;
}
