// custom_classifier: teaching the HTTP client what a service's answers mean.
//
// A search service answers GET /items/{id}. Right after an item is written,
// its replicas may not have it yet: they answer 404 with `x-index-lag: 1`,
// which means "ask again shortly", not "there is no such item". And a cache in
// front of it sometimes cuts a body short while still answering 200.
//
// Two additions to the client's default rules say so:
//   - a classifier extension (coretry::http::classifier_extension) makes a
//     404 with `x-index-lag` transient; any other 404 stays permanent;
//   - response validation (request_options::validate) rejects a 200 whose
//     body is not a complete item, and a second extension makes that
//     rejection transient, since the next answer may be whole (by default a
//     rejected 2xx is permanent).
// Extensions are consulted in order before the default table; returning
// nullopt leaves the decision to the next one. For operations other than
// HTTP, a classifier is any callable `verdict(const error_code&, const T&)`
// passed to coretry::async_retry (see book_detail.cpp).
//
// The program serves the item on loopback (404 with lag, then a cut body,
// then the whole item) and checks that item 9 succeeds on the third attempt
// and that item 5, a plain 404, stops after one. Exit status 0 when both do.

#include "loopback_server.hpp"
#include "story.hpp"

#include <coretry/http/client.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/write.hpp>

#include <cstdio>
#include <string>
#include <string_view>

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;

namespace {

/// The search service: item 9 is still replicating on the first call and
/// cut short by the cache on the second; item 5 does not exist.
struct search_service {
  int calls_for_9 = 0;
  int calls_for_5 = 0;

  asio::awaitable<bool> handle(asio::ip::tcp::socket& socket, const beast_http::request<beast_http::string_body>& req) {
    beast_http::response<beast_http::string_body> res{beast_http::status::ok, req.version()};
    res.set(beast_http::field::content_type, "application/json");
    if (req.target() == "/items/9") {
      ++calls_for_9;
      if (calls_for_9 == 1) {
        res.result(beast_http::status::not_found);
        res.set("x-index-lag", "1");
        res.body() = R"({"error":"not indexed yet"})";
      } else if (calls_for_9 == 2) {
        res.body() = R"({"id":9,"name":"la)"; // what a cache that cut the body sends
      } else {
        res.body() = R"({"id":9,"name":"lamp","price":30})";
      }
    } else {
      ++calls_for_5;
      res.result(beast_http::status::not_found);
      res.body() = R"({"error":"no such item"})";
    }
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    auto [ec, n] = co_await beast_http::async_write(socket, res, asio::as_tuple(asio::use_awaitable));
    (void)n;
    co_return !ec;
  }
};

/// A 404 that says the index is behind is worth another attempt.
std::optional<coretry::verdict> index_lag_is_transient(const boost::system::error_code& ec,
                                                       const coretry::http::exchange& x) {
  if (ec || !x.res || x.res->result() != beast_http::status::not_found) return std::nullopt;
  if (x.res->find("x-index-lag") == x.res->end()) return std::nullopt; // a real 404: the default rule
  return coretry::verdict::transient("index_lag", coretry::delivery::answered);
}

/// A 2xx that validation rejected (exchange::problem) is worth another attempt.
std::optional<coretry::verdict> rejected_body_is_transient(const boost::system::error_code& ec,
                                                           const coretry::http::exchange& x) {
  if (ec || !x.res || x.res->result_int() / 100 != 2 || x.problem.empty()) return std::nullopt;
  return coretry::verdict::transient("incomplete_item", coretry::delivery::answered);
}

/// A complete item: a JSON object with a price. (A real program would parse it.)
std::optional<std::string> check_item(const coretry::http::response& res) {
  const std::string_view body = res.body();
  if (body.empty() || body.front() != '{' || body.back() != '}') return "the item is cut short";
  if (body.find(R"("price":)") == std::string_view::npos) return "the item has no price";
  return std::nullopt;
}

std::string categories(const coretry::http::result& r) {
  std::string out;
  for (const auto& record : r.records) {
    if (!out.empty()) out += ", ";
    out += record.classified.category;
  }
  return out;
}

} // namespace

int main() {
  asio::io_context io;
  search_service search;
  examples::loopback_server server(io, [&](auto& socket, const auto& req) { return search.handle(socket, req); });
  coretry::http::client client(io.get_executor());

  coretry::http::request_options options;
  options.route = "/items/{id}";
  options.classifiers = {index_lag_is_transient, rejected_body_is_transient};
  options.validate = check_item;

  examples::story story;

  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto nine = co_await client.async_send(server.url("/items/9"),
                                               coretry::http::request{beast_http::verb::get, "", 11}, options,
                                               asio::use_awaitable);
        std::printf("GET /items/9: %s after %u attempt(s): %s\n", std::string(coretry::to_string(nine.reason)).c_str(),
                    nine.attempts, categories(nine).c_str());
        story.expect(nine.succeeded() && nine.attempts == 3, "the lagging 404 and the cut body were both retried");
        story.expect(nine.value && nine.value->res && nine.value->res->body() == R"({"id":9,"name":"lamp","price":30})",
               "the caller got the whole item");
        story.expect(nine.records.size() == 3 && nine.records[0].classified.category == "index_lag" &&
                   nine.records[1].classified.category == "incomplete_item",
               "each retry is recorded with the category our classifiers gave it");

        auto five = co_await client.async_send(server.url("/items/5"),
                                               coretry::http::request{beast_http::verb::get, "", 11}, options,
                                               asio::use_awaitable);
        std::printf("GET /items/5: %s after %u attempt(s): %s\n", std::string(coretry::to_string(five.reason)).c_str(),
                    five.attempts, categories(five).c_str());
        story.expect(five.reason == coretry::stop_reason::rejected && five.attempts == 1 && search.calls_for_5 == 1,
               "a 404 without the lag header is not retried");

        client.close_idle();
        server.stop();
      },
      story.on_end());
  io.run();
  return story.exit_status();
}
