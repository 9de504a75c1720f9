#include "cli/demo.hpp"

#include "cli/attempt_details.hpp"
#include "cli/command_line.hpp"
#include "cli/report.hpp"

#include <coretry/http/client.hpp>
#include <coretry/testing/manual_clock.hpp>
#include <faults/fault_server.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <thread>

namespace coretry::cli {
namespace {

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using namespace std::chrono_literals;

/// The fault server on a thread of its own, as a remote API would be.
class background_server {
public:
  background_server() : guard_(io_.get_executor()) {
    server_.emplace(io_);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~background_server() {
    server_->stop();
    guard_.reset();
    thread_.join();
  }
  background_server(const background_server&) = delete;
  background_server& operator=(const background_server&) = delete;

  std::string url(std::string_view target) const { return server_->base_url() + std::string{target}; }
  std::string base_url() const { return server_->base_url(); }
  std::size_t requests() const { return server_->log().size(); }

private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::optional<coretry::faults::fault_server> server_;
  std::thread thread_;
};

/// One step of a fault-server sequence: a status and options, each value
/// percent-encoded so that commas, semicolons and spaces survive.
std::string step(unsigned status, std::initializer_list<std::pair<std::string_view, std::string_view>> options) {
  std::string text = std::to_string(status);
  for (const auto& [name, value] : options) {
    text += ";" + std::string{name};
    if (!value.empty()) text += "=" + percent_encode(value);
  }
  return text;
}

std::string sequence(std::string_view name, std::initializer_list<std::string> steps) {
  std::string target = "/seq/" + std::string{name} + "?steps=";
  bool first = true;
  for (const std::string& s : steps) {
    if (!first) target += ",";
    target += s;
    first = false;
  }
  return target;
}

/// What a person needs from an error body: the API's error and message
/// fields when it has them, else the body itself.
std::string summarize_body(std::string_view body) {
  boost::system::error_code error;
  const boost::json::value json = boost::json::parse(body, error);
  std::string text;
  if (!error && json.is_object()) {
    const boost::json::object& object = json.get_object();
    const auto* message = object.if_contains("error");
    const auto* detail = object.if_contains("message");
    if (message && message->is_string()) {
      text = "\"" + std::string{message->get_string()} + "\"";
      if (detail && detail->is_string()) text += " (" + std::string{detail->get_string()} + ")";
    }
  }
  if (text.empty()) text = printable_utf8(body, 200);
  constexpr std::size_t widest = 60;
  if (text.size() > widest) text = text.substr(0, widest - 3) + "...";
  return text;
}

std::string milliseconds(duration d) {
  std::array<char, 32> text{};
  std::snprintf(text.data(), text.size(), "%.0f ms", std::chrono::duration<double, std::milli>(d).count());
  return text.data();
}

struct table_row {
  std::array<std::string, 7> cells;
};

void print_table(const std::vector<table_row>& rows) {
  std::array<std::size_t, 7> widths{};
  for (const table_row& row : rows)
    for (std::size_t i = 0; i < widths.size(); ++i) widths[i] = std::max(widths[i], row.cells[i].size());
  for (const table_row& row : rows) {
    std::string line = " ";
    for (std::size_t i = 0; i < widths.size(); ++i) {
      line += " " + row.cells[i];
      if (i + 1 < widths.size()) line += std::string(widths[i] - row.cells[i].size() + 1, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

/// The seed's apiCall client: retries 3 (4 attempts), 10 s per attempt, 30 s
/// overall, full jitter from 500 ms doubling to 8 s, Retry-After first.
coretry::policy api_call_policy() {
  coretry::policy p;
  p.max_attempts = 4;
  p.overall_deadline = 30s;
  p.attempt_limit = 10s;
  p.backoff.initial_window = 500ms;
  p.backoff.max_window = 8s;
  p.backoff.jitter = jitter_kind::full;
  return p;
}

class demo {
public:
  int run() {
    std::printf("coretry demo: the specification's failures, replayed against the fault server\n"
                "running in this process at %s, with the coretry HTTP client.\n\n",
                server_.base_url().c_str());
    seven_failures();
    lying_success();
    book_detail();
    std::printf("\n");
    if (deviations_.empty()) {
      std::printf("Every case behaved as the seeds say.\n");
      return 0;
    }
    for (const std::string& deviation : deviations_) std::printf("DEVIATION: %s\n", deviation.c_str());
    return 1;
  }

private:
  http::result send(beast_http::verb method, const std::string& target, std::string body,
                    http::request_options options, attempt_details& details) {
    options.classifiers.insert(options.classifiers.begin(), details.watcher());
    http::request request{method, "", 11};
    if (!body.empty()) {
      request.body() = std::move(body);
      request.set(beast_http::field::content_type, "application/json");
    }
    std::optional<http::result> result;
    std::exception_ptr failure;
    client_.async_send(server_.url(target), std::move(request), options,
                       [&](std::exception_ptr e, http::result r) {
                         failure = std::move(e);
                         result = std::move(r);
                       });
    io_.run();
    io_.restart();
    if (failure) std::rethrow_exception(failure);
    return std::move(*result);
  }

  void expect(bool held, const std::string& what) {
    if (!held) deviations_.push_back(what);
  }

  /// The seed's classify(): a 429 meaning "out of credits" and a scraper's
  /// 503 about the target website are permanent.
  http::request_options api_call_options(coretry::policy p = api_call_policy()) {
    http::request_options options;
    options.policy = p;
    options.route = "api";
    options.classifiers.push_back(http::permanent_429_when_header("x-api-remaining-credits", "0"));
    options.classifiers.push_back(
        http::permanent_5xx_when_body_matches("website returned HTTP 4[0-9][0-9]", http::letter_case::insensitive));
    return options;
  }

  static std::string status_text(const http::result& r) {
    return r.value && r.value->res ? std::to_string(r.value->res->result_int()) : "none";
  }
  static std::string body_text(const http::result& r) {
    return r.value && r.value->res ? summarize_body(r.value->res->body()) : "";
  }
  static std::string retried_text(const http::result& r) {
    if (r.attempts > 1) return "Yes, after " + describe_duration(r.records[1].wait_before);
    if (r.records.empty() || r.reason != stop_reason::rejected) return "No (" + std::string{coretry::to_string(r.reason)} + ")";
    return "No (" + std::string{r.records.back().classified.category} + ")";
  }

  // A failure the client must not repeat: one attempt, the expected status.
  // Each is the first step of a sequence whose next step would succeed, so a
  // wrong retry would show as a success.
  table_row refused_case(const std::string& name, const std::string& label, const std::string& first_step,
                         unsigned expected_status) {
    attempt_details details;
    const auto r = send(beast_http::verb::get, sequence(name, {first_step, step(200, {})}), "", api_call_options(),
                        details);
    expect(r.reason == stop_reason::rejected && r.attempts == 1 && status_text(r) == std::to_string(expected_status),
           label + ": expected rejected after 1 attempt with " + std::to_string(expected_status) + ", got " +
               describe_failure(r, details));
    return {{"", label, status_text(r), body_text(r), retried_text(r), std::to_string(r.attempts),
             milliseconds(r.elapsed)}};
  }

  void seven_failures() {
    std::printf("Seed 001: seven failures, two retries\n"
                "Client policy (the seed's apiCall): 4 attempts (3 retries), 10 s per attempt, 30 s overall,\n"
                "full jitter from 500 ms doubling to 8 s, a valid Retry-After taken as a minimum; a 429 with\n"
                "x-api-remaining-credits: 0 and a 5xx saying \"website returned HTTP 4xx\" are permanent.\n\n");
    std::vector<table_row> rows;
    rows.push_back({{"#", "Case", "Status", "Error body", "Retried?", "Attempts", "Elapsed"}});

    const std::string json_type = "Content-Type:application/json";
    rows.push_back(refused_case(
        "no-key", "No API key",
        step(401, {{"header", json_type},
                   {"body", R"({"status":"error","error":"unauthorized","message":"Put your key in the x-api-key header."})"}}),
        401));
    rows.push_back(refused_case("typo-param", "Misspelled param (emial=)",
                                step(400, {{"header", json_type}, {"body", R"({"missing":["email"]})"}}), 400));
    rows.push_back(refused_case(
        "typo-api", "Misspelled API name",
        step(404, {{"header", json_type}, {"body", R"({"status":"error","error":"Unknown API 'emailvalidatr'"})"}}),
        404));
    rows.push_back(refused_case(
        "scraper", "Scraper target blocks bots",
        step(503, {{"header", json_type},
                   {"body", R"({"status":"error","error":"The website returned HTTP 403 and could not be read."})"}}),
        503));
    rows.push_back(post_timeout());
    for (table_row& row : flaky_then_fine()) rows.push_back(std::move(row));
    for (std::size_t i = 1; i < rows.size(); ++i) rows[i].cells[0] = std::to_string(i);
    print_table(rows);
    std::printf("%s\n", flaky_note_.c_str());
  }

  // An HTML-to-PDF render takes 3 s; the client gives up after 1 s. The
  // render may have happened: a POST without a key is not repeated.
  table_row post_timeout() {
    attempt_details details;
    coretry::policy p = api_call_policy();
    p.attempt_limit = 1s;
    const std::size_t before = server_.requests();
    const auto r = send(beast_http::verb::post, "/status/200?delay=3000", R"({"html":"<h1>Invoice 1042</h1>"})",
                        api_call_options(p), details);
    const bool sent_once = server_.requests() == before + 1;
    expect(r.reason == stop_reason::outcome_unknown && r.attempts == 1 && sent_once && r.elapsed >= 900ms &&
               r.elapsed < 2500ms,
           "Client timeout on a POST: expected outcome_unknown after one 1 s attempt, got " + describe_failure(r, details));
    return {{"", "Client timeout on a POST", status_text(r), "gave up after " + describe_duration(r.records.front().end),
             retried_text(r), std::to_string(r.attempts), milliseconds(r.elapsed)}};
  }

  // The seed's stub: 429 with Retry-After: 1, then 502, then 200. One
  // operation, shown as two rows from its attempt records.
  std::vector<table_row> flaky_then_fine() {
    attempt_details details;
    const std::string target = sequence(
        "stub", {step(429, {{"retry-after", "1"},
                            {"header", "Content-Type:application/json"},
                            {"body", R"({"status":"error","error":"Rate limit exceeded. Slow down and retry."})"}}),
                 step(502, {{"header", "Content-Type:application/json"},
                            {"body", R"({"status":"error","error":"Bad gateway"})"}}),
                 step(200, {{"header", "Content-Type:application/json"}, {"body", R"({"ok":true})"}})});
    const auto r = send(beast_http::verb::get, target, "", api_call_options(), details);
    const auto& attempts = details.attempts();
    const bool shape = r.reason == stop_reason::succeeded && r.attempts == 3 && attempts.size() == 3 &&
                       attempts[0].status == 429u && attempts[1].status == 502u && attempts[2].status == 200u;
    expect(shape && r.records[1].wait_from == wait_source::server && r.records[1].wait_before >= 1s &&
               r.records[2].wait_from == wait_source::local,
           "429 then 502 then 200: expected success after 3 attempts, the first wait at least the server's 1 s; got " +
               describe_failure(r, details));
    if (!shape) {
      flaky_note_ = "  (the 429/502/200 operation did not run as scripted: " + describe_failure(r, details) + ")\n";
      return {};
    }
    flaky_note_ = "  Rows 6 and 7 are attempts 1 and 2 of one GET, whose attempt 3 got 200 " + attempts[2].body_start +
                  ";\n  their Elapsed is when the retry went out. The whole operation took " +
                  milliseconds(r.elapsed) + ".\n";
    const auto row = [&](std::size_t i, std::string label) {
      return table_row{{"", std::move(label), std::to_string(*attempts[i].status), summarize_body(attempts[i].body_start),
                        "Yes, after " + describe_duration(r.records[i + 1].wait_before),
                        std::to_string(i + 1) + " of 3", milliseconds(r.records[i + 1].start)}};
    };
    return {row(0, "Rate limited"), row(1, "Upstream hiccup")};
  }

  // A 200 whose body is not what was asked for: no retry policy catches it,
  // checking the response does.
  void lying_success() {
    constexpr std::size_t asked = 40;
    const std::string body =
        R"({"status":"ok","data":{"passwords":[{"password":"Gfs3fJgV01PI","length":12}]}})";
    http::request_options options = api_call_options();
    options.validate = [](const http::response& res) -> std::optional<std::string> {
      boost::system::error_code error;
      const boost::json::value json = boost::json::parse(res.body(), error);
      const boost::json::value* length = error ? nullptr : json.find_pointer("/data/passwords/0/length", error);
      if (!length || !length->is_int64()) return "the response does not say how long the password is";
      if (length->as_int64() == static_cast<std::int64_t>(asked)) return std::nullopt;
      return "asked for " + std::to_string(asked) + " characters, got " + std::to_string(length->as_int64()) +
             ": check the parameter names";
    };
    attempt_details details;
    const auto r = send(beast_http::verb::get,
                        "/status/200?header=Content-Type%3Aapplication%2Fjson&body=" + percent_encode(body), "",
                        options, details);
    std::printf("\nThe 200 that lies: GET passwordgenerator?lenght=40 (a misspelled optional parameter)\n");
    std::printf("  the API answered %s %s\n", status_text(r).c_str(), body.c_str());
    const std::string problem = r.value ? r.value->problem : "";
    std::printf("  => %s after %u attempt: %s\n", std::string{coretry::to_string(r.reason)}.c_str(), r.attempts,
                problem.c_str());
    expect(r.reason == stop_reason::rejected && r.attempts == 1 &&
               problem == "asked for 40 characters, got 12: check the parameter names",
           "The 200 that lies: expected rejected with the validation message, got " + describe_failure(r, details));
  }

  void book_detail() {
    const coretry::policy book_detail_policy; // the defaults are the specification's book-detail read
    std::printf("\nSeed 000: the book-detail read, GET /books/42\n"
                "Policy: 3 attempts, 1000 ms overall, 250 ms per attempt, at least 100 ms per attempt,\n"
                "50 ms reserve, full jitter in windows of 100 then 200 ms (draws fixed to the seed's 40 and 140 ms).\n");

    std::printf("\nPricing hangs after its headers, then before them, then answers in 210 ms:\n");
    {
      attempt_details details;
      timeline printer(stdout, "  ", book_detail_policy.max_attempts, details);
      // The jitter draws as fractions of each window: 40 ms of 100, 140 of 200.
      coretry::testing::scripted_random seed_draws{0.4, 0.7};
      http::request_options options;
      options.policy = book_detail_policy;
      options.route = "/books/{id}";
      options.observer = &printer;
      options.random = &seed_draws;
      const std::string book = R"({"id":"42","title":"Release It!","price":{"amount":"34.95","currency":"USD"}})";
      const std::string target =
          sequence("pricing", {step(200, {{"hang-after-headers", ""}}), step(200, {{"delay", "10000"}}),
                               step(200, {{"delay", "210"}, {"header", "Content-Type:application/json"}, {"body", book}})});
      const auto r = send(beast_http::verb::get, target, "", options, details);
      std::printf("  => %s after %u attempts in %s (the seed's worked example: 890 ms)\n",
                  std::string{coretry::to_string(r.reason)}.c_str(), r.attempts, milliseconds(r.elapsed).c_str());
      const bool timed_out_twice = r.records.size() == 3 && r.records[0].classified.category == "timeout" &&
                                   r.records[1].classified.category == "timeout";
      expect(r.reason == stop_reason::succeeded && r.attempts == 3 && timed_out_twice && r.elapsed < 1000ms,
             "Book detail: expected success on the third attempt within 1000 ms, got " + describe_failure(r, details));
    }

    std::printf("\nPricing answers 503 with Retry-After: 1 after 100 ms:\n");
    {
      attempt_details details;
      timeline printer(stdout, "  ", book_detail_policy.max_attempts, details);
      http::request_options options;
      options.policy = book_detail_policy;
      options.route = "/books/{id}";
      options.observer = &printer;
      const std::string unavailable =
          R"({"error":{"code":"temporarily_unavailable","message":"Pricing is being deployed."}})";
      const auto r = send(beast_http::verb::get,
                          "/status/503?delay=100&retry-after=1&header=Content-Type%3Aapplication%2Fjson&body=" +
                              percent_encode(unavailable),
                          "", options, details);
      std::printf("  => %s after %u attempt in %s: waiting 1 s does not fit the 1000 ms deadline, and the\n"
                  "     server's delay is never shortened to fit, so the client stops at once with the 503\n",
                  std::string{coretry::to_string(r.reason)}.c_str(), r.attempts, milliseconds(r.elapsed).c_str());
      expect(r.reason == stop_reason::server_delay_too_long && r.attempts == 1 && status_text(r) == "503",
             "Book detail 503: expected server_delay_too_long after 1 attempt, got " + describe_failure(r, details));
    }
  }

  background_server server_;
  asio::io_context io_;
  http::client client_{io_.get_executor()};
  std::vector<std::string> deviations_;
  std::string flaky_note_;
};

} // namespace

int run_demo() {
  demo d;
  return d.run();
}

} // namespace coretry::cli
