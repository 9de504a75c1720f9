// beast_server_handler: coretry inside a Beast server's request handler.
//
// A catalogue server answers GET /books/{id} by asking a pricing service for
// the price, through coretry::http::client, under retry. The caller says how
// long it is willing to wait in the `x-coretry-deadline-ms` header (whole
// milliseconds); the handler makes that, less a small reserve to write its
// own answer, the overall deadline of the pricing call, and tells pricing, on
// every attempt, how long that attempt has left.
//
// The program is its own caller and its own pricing service (both on
// loopback): pricing fails book 42 once with 503 and then answers, and takes
// 400 ms for book 7. It checks that
//   - book 42 with 800 ms is a 200 after two pricing attempts;
//   - book 7 with 200 ms is a 504 that arrives near 200 ms, not after 400 ms;
//   - a deadline header that is not a number of milliseconds is a 400.
// Exit status 0 when all three happen, 1 otherwise.

#include "loopback_server.hpp"
#include "story.hpp"

#include <coretry/http/client.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/write.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using namespace std::chrono_literals;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

constexpr std::string_view deadline_header = "x-coretry-deadline-ms";
constexpr milliseconds max_deadline{1000}; // also the deadline of a request without the header
constexpr milliseconds reserve{10};        // kept back to write our own answer

/// The caller's deadline header: digits only, at most max_deadline. Anything
/// else (a sign, a unit, a fraction, no digits) is refused.
std::optional<milliseconds> parse_deadline(std::string_view text) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) return max_deadline; // more digits than any number
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return std::min(milliseconds(static_cast<std::int64_t>(std::min<std::uint64_t>(value, max_deadline.count()))),
                  max_deadline);
}

using string_response = beast_http::response<beast_http::string_body>;

asio::awaitable<bool> send(asio::ip::tcp::socket& socket, const beast_http::request<beast_http::string_body>& req,
                           beast_http::status status, std::string body,
                           std::vector<std::pair<std::string, std::string>> fields = {}) {
  string_response res{status, req.version()};
  res.set(beast_http::field::content_type, "application/json");
  for (auto& [name, value] : fields) res.set(name, value);
  res.body() = std::move(body);
  res.keep_alive(req.keep_alive());
  res.prepare_payload();
  auto [ec, n] = co_await beast_http::async_write(socket, res, asio::as_tuple(asio::use_awaitable));
  (void)n;
  co_return !ec;
}

/// The pricing service: 503 for the first call about book 42, slow for book 7.
struct pricing_service {
  std::map<std::string, int> calls;
  std::vector<milliseconds> deadlines_told; // what each attempt said it had left

  asio::awaitable<bool> handle(asio::ip::tcp::socket& socket, const beast_http::request<beast_http::string_body>& req) {
    const std::string id(req.target().substr(req.target().rfind('/') + 1));
    if (auto field = req.find(std::string{deadline_header}); field != req.end())
      if (auto told = parse_deadline(field->value())) deadlines_told.push_back(*told);
    if (++calls[id] == 1 && id == "42")
      co_return co_await send(socket, req, beast_http::status::service_unavailable, R"({"error":"busy"})");
    if (id == "7") {
      asio::steady_timer slow(socket.get_executor(), 400ms);
      co_await slow.async_wait(asio::use_awaitable);
    }
    co_return co_await send(socket, req, beast_http::status::ok, R"({"price":12.5})");
  }
};

/// The catalogue server's handler: one pricing call per request, retried by
/// coretry within the caller's deadline.
struct catalogue_handler {
  coretry::http::client& pricing;
  std::string pricing_url; // ends with '/'

  asio::awaitable<bool> handle(asio::ip::tcp::socket& socket, const beast_http::request<beast_http::string_body>& req) {
    milliseconds deadline = max_deadline;
    if (auto field = req.find(std::string{deadline_header}); field != req.end()) {
      auto parsed = parse_deadline(field->value());
      if (!parsed)
        co_return co_await send(socket, req, beast_http::status::bad_request,
                                R"({"error":"x-coretry-deadline-ms must be a whole number of milliseconds"})");
      deadline = *parsed;
    }
    const std::string id(req.target().substr(req.target().rfind('/') + 1));

    coretry::http::request_options options;
    options.route = "/prices/{id}"; // what events and metrics see, never the URL
    options.policy.overall_deadline = deadline > reserve ? deadline - reserve : milliseconds::zero();
    options.decorate = [](coretry::http::request& out, const auto& attempt) {
      const auto left = std::chrono::duration_cast<milliseconds>(attempt.deadline - steady_clock::now());
      out.set(std::string{deadline_header}, std::to_string(std::max<std::int64_t>(left.count(), 0)));
    };
    if (options.policy.overall_deadline < options.policy.min_attempt_allowance + options.policy.completion_reserve)
      co_return co_await send(socket, req, beast_http::status::gateway_timeout, R"({"error":"no time left"})");

    auto result = co_await pricing.async_send(pricing_url + id,
                                              coretry::http::request{beast_http::verb::get, "", 11}, options,
                                              asio::use_awaitable);
    const std::vector<std::pair<std::string, std::string>> fields{
        {"x-pricing-attempts", std::to_string(result.attempts)},
        {"x-pricing-stop", std::string(coretry::to_string(result.reason))}};
    if (result && result.value->res)
      co_return co_await send(socket, req, beast_http::status::ok, result.value->res->body(), fields);
    const bool out_of_time = result.reason == coretry::stop_reason::deadline_exhausted ||
                             result.last_error == coretry::attempt_error::timed_out;
    co_return co_await send(socket, req,
                            out_of_time ? beast_http::status::gateway_timeout : beast_http::status::bad_gateway,
                            R"({"error":"pricing failed"})", fields);
  }
};

struct answer {
  unsigned status = 0;
  std::string attempts;
  milliseconds took{};
};

/// One call to the catalogue, as its caller: one attempt, the caller's own deadline in the header.
asio::awaitable<answer> call(coretry::http::client& caller, const std::string& url, const std::string& deadline) {
  coretry::http::request req{beast_http::verb::get, "", 11};
  req.set(std::string{deadline_header}, deadline);
  coretry::http::request_options options;
  options.route = "/books/{id}";
  options.policy.max_attempts = 1;
  options.policy.overall_deadline = 2s;
  options.policy.attempt_limit = 2s;
  const auto start = steady_clock::now();
  auto result = co_await caller.async_send(url, std::move(req), options, asio::use_awaitable);
  answer a;
  a.took = std::chrono::duration_cast<milliseconds>(steady_clock::now() - start);
  if (result.value && result.value->res) {
    a.status = result.value->res->result_int();
    a.attempts = std::string((*result.value->res)["x-pricing-attempts"]);
  }
  co_return a;
}

} // namespace

int main() {
  asio::io_context io;
  pricing_service pricing_logic;
  examples::loopback_server pricing_server(
      io, [&](auto& socket, const auto& req) { return pricing_logic.handle(socket, req); });
  coretry::http::client pricing(io.get_executor());
  catalogue_handler catalogue_logic{pricing, pricing_server.url("/prices/")};
  examples::loopback_server catalogue(
      io, [&](auto& socket, const auto& req) { return catalogue_logic.handle(socket, req); });
  coretry::http::client caller(io.get_executor());

  examples::story story;

  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto a = co_await call(caller, catalogue.url("/books/42"), "800");
        std::printf("GET /books/42, 800 ms: %u after %s pricing attempt(s), %lld ms\n", a.status, a.attempts.c_str(),
                    static_cast<long long>(a.took.count()));
        story.expect(a.status == 200 && a.attempts == "2", "pricing's 503 was retried within the deadline");
        story.expect(!pricing_logic.deadlines_told.empty() &&
                   std::all_of(pricing_logic.deadlines_told.begin(), pricing_logic.deadlines_told.end(),
                               [](milliseconds told) { return told <= 790ms; }),
               "each pricing attempt was told no more than the caller's deadline less the reserve");

        auto b = co_await call(caller, catalogue.url("/books/7"), "200");
        std::printf("GET /books/7, 200 ms: %u after %s pricing attempt(s), %lld ms\n", b.status, b.attempts.c_str(),
                    static_cast<long long>(b.took.count()));
        story.expect(b.status == 504, "a pricing call slower than the deadline is a 504");
        // The bound leaves room for a loaded machine; pricing itself takes 400 ms.
        story.expect(b.took < 350ms, "the 504 came at the deadline, not when pricing answered");

        auto c = co_await call(caller, catalogue.url("/books/42"), "soon");
        std::printf("GET /books/42, deadline \"soon\": %u\n", c.status);
        story.expect(c.status == 400, "a deadline that is not whole milliseconds is refused");

        caller.close_idle();
        pricing.close_idle();
        catalogue.stop();
        pricing_server.stop();
      },
      story.on_end());
  io.run();
  return story.exit_status();
}
