#include "request_head.hpp"

#include <boost/beast/http/field.hpp>

#include <charconv>

namespace coretry::http::detail {

namespace beast_http = boost::beast::http;

namespace {

void append_field(std::string& out, std::string_view name, std::string_view value) {
  out.append(name).append(": ", 2).append(value).append("\r\n", 2);
}

} // namespace

void write_request_head(std::string& out, const request& req, const added_fields& added) {
  out.clear();
  const std::string_view target = req.target().empty() ? added.target : std::string_view(req.target());
  const unsigned version = req.version();
  const char version_text[] = {'H', 'T', 'T', 'P', '/', static_cast<char>('0' + version / 10 % 10), '.',
                               static_cast<char>('0' + version % 10)};
  out.append(req.method_string()).append(1, ' ').append(target).append(1, ' ');
  out.append(version_text, sizeof version_text).append("\r\n", 2);
  // Host first (RFC 9110 §7.2), then the request's own fields in order.
  if (!added.host.empty() && req.find(beast_http::field::host) == req.end()) append_field(out, "Host", added.host);
  for (const auto& field : req) append_field(out, field.name_string(), field.value());
  if (!added.user_agent.empty() && req.find(beast_http::field::user_agent) == req.end())
    append_field(out, "User-Agent", added.user_agent);
  out.append("\r\n", 2);
  if (req.chunked() && !req.body().empty()) {
    // The whole body as one chunk: its size line here, the rest after it.
    char size[2 * sizeof(std::size_t)];
    const auto end = std::to_chars(size, size + sizeof size, req.body().size(), 16).ptr;
    out.append(size, end).append("\r\n", 2);
  }
}

std::array<boost::asio::const_buffer, 3> request_buffers(const std::string& head, const request& req) {
  static constexpr std::string_view after_chunk = "\r\n0\r\n\r\n";
  std::string_view end;
  if (req.chunked()) end = req.body().empty() ? after_chunk.substr(2) : after_chunk;
  return {boost::asio::buffer(head), boost::asio::buffer(req.body()), boost::asio::buffer(end)};
}

} // namespace coretry::http::detail
