#include "bookstore_support.hpp"

#include "policies.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <doctest/doctest.h>

#include <regex>
#include <sstream>

#include <sys/socket.h>
#include <sys/time.h>

namespace bookstore_tests {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using namespace std::chrono_literals;

const std::string bookstore_program = CORETRY_BOOKSTORE_PROGRAM;

bookstore_runner::bookstore_runner(coretry::bookstore::options opts, unsigned threads) {
  opts.listen = "127.0.0.1:0";
  server_.emplace(io_, std::move(opts));
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { io_.run(); });
}

bookstore_runner::~bookstore_runner() {
  server_->shutdown();
  for (auto& t : threads_) t.join(); // run() returns once the server holds no work
  server_.reset();
}

http_reply get(unsigned short port, const std::string& target,
               const std::vector<std::pair<std::string, std::string>>& fields) {
  asio::io_context io;
  asio::ip::tcp::socket socket{io};
  socket.connect({asio::ip::make_address("127.0.0.1"), port});
  timeval timeout{20, 0};
  ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  bhttp::request<bhttp::string_body> req{bhttp::verb::get, target, 11};
  req.set(bhttp::field::host, "127.0.0.1");
  for (const auto& [name, value] : fields) req.set(name, value);
  bhttp::write(socket, req);
  beast::flat_buffer buffer;
  bhttp::response<bhttp::string_body> res;
  boost::system::error_code error;
  bhttp::read(socket, buffer, res, error);
  REQUIRE_MESSAGE(!error, "reading the response: ", error.message());
  http_reply out;
  out.status = res.result_int();
  out.body = res.body();
  for (const auto& f : res) out.fields[std::string{f.name_string()}] = std::string{f.value()};
  return out;
}

unsigned short port_of(const std::string& base_url) {
  return static_cast<unsigned short>(std::stoul(base_url.substr(base_url.rfind(':') + 1)));
}

coretry::policy quick_policy() { return coretry::test::quick_policy(20s, 10s, 1ms); }

coretry::bookstore::options options_for(const std::string& pricing_url, bool coordination) {
  coretry::bookstore::options o;
  o.pricing_url = pricing_url;
  o.policy = quick_policy();
  o.max_deadline = 20s;
  o.coordination = coordination;
  return o;
}

std::map<std::string, double> parse_metrics(const std::string& text) {
  static const std::regex sample{
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"(,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*\})? (\S+)$)"};
  std::map<std::string, double> out;
  std::istringstream lines{text};
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) continue;
    INFO("line: ", line);
    REQUIRE(std::regex_match(line, sample));
    const auto space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

double metric(const std::string& text, const std::string& key) {
  const auto samples = parse_metrics(text);
  const auto found = samples.find(key);
  REQUIRE_MESSAGE(found != samples.end(), "no sample ", key);
  return found->second;
}

} // namespace bookstore_tests
