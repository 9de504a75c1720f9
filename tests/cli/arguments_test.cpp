// The argument checks and the policy mapping, in process: the exact rules
// behind the one-line errors and the adjusted policies.

#include "cli/attempt_details.hpp"
#include "cli/command_line.hpp"
#include "cli/fetch.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using coretry::cli::fetch_arguments;
using coretry::cli::usage_error;

namespace {

fetch_arguments with_url() {
  fetch_arguments args;
  args.url = "http://127.0.0.1:9/books/42";
  return args;
}

std::string refusal(const fetch_arguments& args) {
  try {
    (void)coretry::cli::make_fetch_plan(args);
  } catch (const usage_error& error) {
    return error.what();
  }
  return "(accepted)";
}

} // namespace

TEST_CASE("cli: durations: plain decimal seconds from 0 to a day") {
  using coretry::cli::parse_seconds;
  CHECK(parse_seconds("--max-time", "2", false) == 2s);
  CHECK(parse_seconds("--max-time", "0.25", false) == 250ms);
  CHECK(parse_seconds("--max-time", ".5", false) == 500ms);
  CHECK(parse_seconds("--max-time", "86400", false) == 24h);
  CHECK(parse_seconds("--idle-timeout", "0", true) == 0s);
  for (const char* bad : {"", "-1", "-0", "nan", "NaN", "inf", "1e3", "0x10", "1.2.3", "2s", " 1", "+1", "86400.5",
                          "100000", "99999999999999999999999999999"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_seconds("--max-time", bad, false), usage_error);
  }
  CHECK_THROWS_WITH(parse_seconds("--max-time", "0", false), doctest::Contains("more than 0"));
  CHECK_THROWS_WITH(parse_seconds("--max-time", "0.0000000001", false), doctest::Contains("more than 0"));
  CHECK_THROWS_WITH(parse_seconds("--max-time", "-1", false), doctest::Contains("negative"));
  CHECK_THROWS_WITH(parse_seconds("--max-time", "100000", false), doctest::Contains("86400"));
}

TEST_CASE("cli: counts: whole numbers in range") {
  using coretry::cli::parse_count;
  CHECK(parse_count("--max-attempts", "1", 1, 1000) == 1);
  CHECK(parse_count("--max-attempts", "1000", 1, 1000) == 1000);
  for (const char* bad : {"0", "1001", "-1", "", "3.0", "1e2", "99999999999999999999"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_count("--max-attempts", bad, 1, 1000), usage_error);
  }
}

TEST_CASE("cli: headers: 'Name: value', never echoing a value") {
  using coretry::cli::parse_header;
  const auto field = parse_header("X-Trace:   abc \t", 1);
  CHECK(field.name == "X-Trace");
  CHECK(field.value == "abc");
  CHECK(parse_header("X-Empty:", 1).value.empty());
  const auto refusal_of = [](std::string_view header) -> std::string {
    try {
      (void)parse_header(header, 2);
    } catch (const usage_error& error) {
      return error.what();
    }
    return "(accepted)";
  };
  CHECK(refusal_of("Authorization Bearer s3cret").find("header 2") != std::string::npos);
  CHECK(refusal_of("Authorization Bearer s3cret").find("s3cret") == std::string::npos);
  CHECK(refusal_of("Authorization: Bearer s3cret\r\nX: y").find("CR, LF") != std::string::npos);
  CHECK(refusal_of("Authorization: Bearer s3cret\r\nX: y").find("s3cret") == std::string::npos);
  CHECK_THROWS_AS(parse_header(": value", 1), usage_error);
  CHECK_THROWS_AS(parse_header("Bad Name: value", 1), usage_error);
}

TEST_CASE("cli: credentials are recognised and redacted") {
  using coretry::cli::is_sensitive_header;
  for (const char* name : {"Authorization", "proxy-authorization", "Cookie", "Set-Cookie", "X-Api-Key", "api-key",
                           "X-Auth-Token", "X-Session-Id", "apikey", "Ocp-Apim-Subscription-Key", "X-Master-Key",
                           "x-functions-key"})
    CHECK_MESSAGE(is_sensitive_header(name), std::string{name});
  for (const char* name : {"Content-Type", "Idempotency-Key", "X-Request-Id", "Accept"})
    CHECK_MESSAGE(!is_sensitive_header(name), std::string{name});

  using coretry::cli::redact_url;
  CHECK(redact_url("http://user:pw@host/path?api_key=abc&page=2") == "http://REDACTED@host/path?api_key=REDACTED&page=2");
  CHECK(redact_url("https://host/x?token=t&q=books") == "https://host/x?token=REDACTED&q=books");
  CHECK(redact_url("https://host/x") == "https://host/x");
}

TEST_CASE("cli: policy: the defaults, and --retry as curl counts it") {
  const auto p = coretry::cli::make_policy(with_url());
  CHECK(p.max_attempts == 3);
  CHECK(p.overall_deadline == 30s);
  CHECK(p.attempt_limit == 10s);
  CHECK(p.min_attempt_allowance == 100ms);
  CHECK(p.completion_reserve == 50ms);
  CHECK(p.backoff.initial_window == 100ms);
  CHECK(p.backoff.max_window == 1s);
  CHECK(p.backoff.jitter == coretry::jitter_kind::full);

  auto args = with_url();
  args.retry = "4";
  CHECK(coretry::cli::make_policy(args).max_attempts == 5);
  args.retry = "0";
  CHECK(coretry::cli::make_policy(args).max_attempts == 1);
  args.max_attempts = "2";
  CHECK_THROWS_WITH(coretry::cli::make_policy(args), doctest::Contains("only one"));
}

TEST_CASE("cli: policy: --hedge-after and --max-hedges") {
  auto args = with_url();
  CHECK(coretry::cli::make_policy(args).hedging.max_hedges == 0);
  args.hedge_after = "0.05";
  auto p = coretry::cli::make_policy(args);
  CHECK(p.hedging.max_hedges == 1);
  CHECK(p.hedging.delay == 50ms);
  args.max_hedges = "3";
  CHECK(coretry::cli::make_policy(args).hedging.max_hedges == 3);
  args.max_hedges = "5";
  CHECK_THROWS_WITH(coretry::cli::make_policy(args), doctest::Contains("--max-hedges"));
  args.max_hedges = "0";
  CHECK_THROWS_WITH(coretry::cli::make_policy(args), doctest::Contains("--max-hedges"));
  args.hedge_after = "0";
  args.max_hedges.reset();
  CHECK_THROWS_WITH(coretry::cli::make_policy(args), doctest::Contains("--hedge-after"));
  args.hedge_after.reset();
  args.max_hedges = "1";
  CHECK_THROWS_WITH(coretry::cli::make_policy(args), doctest::Contains("needs --hedge-after"));
}

TEST_CASE("cli: policy: a small --max-time shrinks the reserve and the minimum allowance") {
  auto args = with_url();
  args.max_time = "0.1";
  const auto p = coretry::cli::make_policy(args);
  CHECK(p.overall_deadline == 100ms);
  CHECK(p.attempt_limit == 100ms);
  CHECK(p.completion_reserve == 10ms);
  CHECK(p.min_attempt_allowance == 90ms);

  args.attempt_timeout = "0.05";
  CHECK(coretry::cli::make_policy(args).min_attempt_allowance == 50ms); // never above the attempt limit
}

TEST_CASE("cli: policy: every valid combination of timing options gives a usable policy") {
  const std::vector<std::optional<std::string>> max_times{std::nullopt, "0.000000001", "0.001", "0.05", "0.1",
                                                          "0.15",        "1",           "30",    "86400"};
  const std::vector<std::optional<std::string>> attempt_timeouts{std::nullopt, "0.000000001", "0.01", "0.1", "5",
                                                                 "86400"};
  const std::vector<std::pair<std::optional<std::string>, std::optional<std::string>>> backoffs{
      {std::nullopt, std::nullopt}, {"0", std::nullopt}, {std::nullopt, "0"}, {"5", std::nullopt},
      {std::nullopt, "0.01"},       {"0.2", "0.2"},      {"0", "86400"}};
  for (const auto& max_time : max_times)
    for (const auto& attempt_timeout : attempt_timeouts)
      for (const auto& [initial, cap] : backoffs) {
        auto args = with_url();
        args.max_time = max_time;
        args.attempt_timeout = attempt_timeout;
        args.backoff_initial = initial;
        args.backoff_cap = cap;
        for (const char* jitter : {"none", "full", "equal", "decorrelated"}) {
          args.jitter = jitter;
          coretry::policy p;
          REQUIRE_NOTHROW(p = coretry::cli::make_policy(args));
          CHECK_FALSE(p.validate());
        }
      }
}

TEST_CASE("cli: policy: impossible combinations are usage errors") {
  auto args = with_url();
  args.backoff_initial = "2";
  args.backoff_cap = "1";
  CHECK_THROWS_WITH(coretry::cli::make_policy(args), doctest::Contains("larger than --backoff-cap"));
  args = with_url();
  args.jitter = "sometimes";
  CHECK_THROWS_WITH(coretry::cli::make_policy(args), doctest::Contains("--jitter"));
}

TEST_CASE("cli: plan: curl's -d habits and the request it builds") {
  auto args = with_url();
  args.data = {"a=1", "b=2"};
  args.headers = {"X-Trace: t1"};
  auto plan = coretry::cli::make_fetch_plan(args);
  CHECK(plan.request.method_string() == "POST");
  CHECK(plan.request.body() == "a=1&b=2");
  CHECK(plan.request[boost::beast::http::field::content_type] == "application/x-www-form-urlencoded");
  CHECK(plan.request["X-Trace"] == "t1");

  args.method = "PUT";
  args.headers.push_back("Content-Type: application/json");
  plan = coretry::cli::make_fetch_plan(args);
  CHECK(plan.request.method_string() == "PUT");
  CHECK(plan.request[boost::beast::http::field::content_type] == "application/json");

  args = with_url();
  args.idempotency_key = "auto";
  plan = coretry::cli::make_fetch_plan(args);
  REQUIRE(plan.idempotency_key);
  CHECK(plan.idempotency_key->size() == 36);
}

TEST_CASE("cli: plan: refusals name the problem") {
  auto args = with_url();
  args.url = "example.com/books";
  CHECK(refusal(args).find("no scheme") != std::string::npos);
  args.url = "http:///books";
  CHECK(refusal(args).find("no host") != std::string::npos);
  args.url = "ftp://example.com/books";
  CHECK(refusal(args).find("http or https") != std::string::npos);

  args = with_url();
  args.idempotency_key = "has space";
  CHECK(refusal(args).find("--idempotency-key") != std::string::npos);
  args.headers = {"Idempotency-Key: k1"};
  args.idempotency_key = "k2";
  CHECK(refusal(args).find("only one") != std::string::npos);

  args = with_url();
  args.out_of_credits_header = "x-api-remaining-credits";
  CHECK(refusal(args).find("NAME=VALUE") != std::string::npos);
  args = with_url();
  args.permanent_5xx_body = "website returned (";
  CHECK(refusal(args).find("regular expression") != std::string::npos);
  args = with_url();
  args.method = "GET /x";
  CHECK(refusal(args).find("-X") != std::string::npos);
}

TEST_CASE("cli: bodies are shown as well-formed UTF-8, cut on a character boundary") {
  using coretry::cli::printable_utf8;
  CHECK(printable_utf8("plain", 100) == "plain");
  CHECK(printable_utf8("caf\xc3\xa9", 100) == "caf\xc3\xa9");
  CHECK(printable_utf8("caf\xc3\xa9", 4) == "caf");
  CHECK(printable_utf8("a\xff" "b", 100) == "a\xef\xbf\xbd" "b");
  CHECK(printable_utf8("\xc0\x80", 100) == "\xef\xbf\xbd\xef\xbf\xbd"); // overlong NUL
  CHECK(printable_utf8("\xed\xa0\x80", 100) == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"); // a surrogate
}
