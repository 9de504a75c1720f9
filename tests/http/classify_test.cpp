// The client policy table and idempotency rules, on synthetic exchanges.

#include <coretry/http/classify.hpp>
#include <coretry/http/redact.hpp>
#include <coretry/http/retry_after.hpp>

#include <boost/asio/error.hpp>
#include <boost/beast/http/error.hpp>

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

namespace beast_http = boost::beast::http;
using namespace std::chrono_literals;
using coretry::attempt_status;
using coretry::delivery;
using coretry::http::classify_exchange;
using coretry::http::exchange;
using coretry::http::stage;

namespace {

exchange answered(unsigned status) {
  exchange x;
  x.res.emplace(static_cast<beast_http::status>(status), 11);
  x.reached = stage::complete;
  x.received_at = *coretry::http::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT");
  return x;
}

exchange failed_at(stage s, boost::system::error_code ec, std::size_t written = 0) {
  exchange x;
  x.reached = s;
  x.error = ec;
  x.bytes_written = written;
  return x;
}

} // namespace

TEST_CASE("classify: statuses") {
  for (unsigned s : {200u, 201u, 204u, 299u}) CHECK(classify_exchange({}, answered(s)).status == attempt_status::success);
  for (unsigned s : {408u, 429u, 500u, 502u, 503u, 504u}) {
    CAPTURE(s);
    const auto v = classify_exchange({}, answered(s));
    CHECK(v.status == attempt_status::transient);
    CHECK(v.delivered == delivery::answered);
  }
  for (unsigned s : {301u, 400u, 401u, 403u, 404u, 409u, 413u, 422u, 501u, 505u}) {
    CAPTURE(s);
    CHECK(classify_exchange({}, answered(s)).status == attempt_status::permanent);
  }
}

TEST_CASE("classify: the signs of overload a concurrency limit takes as drops: 503, 429, timeouts, refused connections") {
  for (unsigned s : {429u, 503u}) {
    CAPTURE(s);
    CHECK(classify_exchange({}, answered(s)).overload);
  }
  for (unsigned s : {200u, 404u, 408u, 500u, 502u, 504u, 413u}) {
    CAPTURE(s);
    CHECK_FALSE(classify_exchange({}, answered(s)).overload);
  }
  CHECK(classify_exchange({}, failed_at(stage::reading, coretry::make_error_code(coretry::attempt_error::timed_out), 10))
            .overload);
  CHECK(classify_exchange({}, failed_at(stage::connecting, boost::asio::error::connection_refused)).overload);
  CHECK_FALSE(classify_exchange({}, failed_at(stage::reading, boost::asio::error::connection_reset, 10)).overload);
}

TEST_CASE("classify: a validation problem makes a 2xx permanent") {
  exchange x = answered(200);
  x.problem = "asked for 40 characters, got 12";
  CHECK(classify_exchange({}, x).status == attempt_status::permanent);
}

TEST_CASE("classify: Retry-After on 429, 503 and 413") {
  exchange x = answered(503);
  x.res->set(beast_http::field::retry_after, "7");
  CHECK(classify_exchange({}, x).server_delay == coretry::duration(7s));
  x = answered(429);
  x.res->set(beast_http::field::retry_after, "1.5"); // invalid: local policy only
  const auto v = classify_exchange({}, x);
  CHECK(v.status == attempt_status::transient);
  CHECK_FALSE(v.server_delay);
  x = answered(413);
  x.res->set(beast_http::field::retry_after, "3");
  CHECK(classify_exchange({}, x).status == attempt_status::transient);
  CHECK(classify_exchange({}, x).server_delay == coretry::duration(3s));
  x = answered(500);
  x.res->set(beast_http::field::retry_after, "3");
  CHECK_FALSE(classify_exchange({}, x).server_delay); // not a status that carries it
}

TEST_CASE("classify: an HTTP-date Retry-After is measured against the response's Date") {
  exchange x = answered(503);
  x.res->set(beast_http::field::date, "Sun, 06 Nov 1994 08:49:37 GMT");
  x.res->set(beast_http::field::retry_after, "Sun, 06 Nov 1994 08:50:07 GMT");
  x.received_at += 1h; // a client clock an hour fast must not matter
  CHECK(coretry::http::server_delay(x) == coretry::duration(30s));
  x.res->erase(beast_http::field::date); // without Date: the local arrival time
  CHECK(coretry::http::server_delay(x) == coretry::duration(0s));
}

TEST_CASE("classify: transport failures, and what provably never reached the server") {
  namespace error = boost::asio::error;
  auto check = [](const exchange& x, boost::system::error_code attempt_ec, attempt_status status, delivery d) {
    const auto v = classify_exchange(attempt_ec, x);
    CHECK(v.status == status);
    CHECK(v.delivered == d);
  };
  check(failed_at(stage::resolving, error::host_not_found), {}, attempt_status::transient, delivery::never_sent);
  check(failed_at(stage::connecting, error::connection_refused), {}, attempt_status::transient, delivery::never_sent);
  check(failed_at(stage::handshaking, error::eof), {}, attempt_status::transient, delivery::never_sent);
  check(failed_at(stage::connecting, error::operation_aborted), coretry::attempt_error::timed_out,
        attempt_status::transient, delivery::never_sent);
  check(failed_at(stage::writing, error::broken_pipe, 0), {}, attempt_status::transient, delivery::never_sent);
  check(failed_at(stage::writing, error::broken_pipe, 10), {}, attempt_status::transient, delivery::unknown);
  check(failed_at(stage::reading, error::operation_aborted), coretry::attempt_error::timed_out,
        attempt_status::transient, delivery::unknown);
  check(failed_at(stage::reading, error::connection_reset), {}, attempt_status::transient, delivery::unknown);
  check(failed_at(stage::reading, beast_http::error::body_limit), {}, attempt_status::permanent, delivery::unknown);
  check(failed_at(stage::reading, beast_http::error::header_limit), {}, attempt_status::permanent, delivery::unknown);
  check(failed_at(stage::reading, beast_http::error::bad_version), {}, attempt_status::permanent, delivery::unknown);
  check(failed_at(stage::reading, beast_http::error::end_of_stream), {}, attempt_status::transient, delivery::unknown);
  // On a reused connection even a write of zero bytes may have raced the
  // server's close: not provably unsent.
  exchange reused = failed_at(stage::writing, error::connection_reset, 0);
  reused.reused_connection = true;
  check(reused, {}, attempt_status::transient, delivery::unknown);
}

TEST_CASE("classify: the pool's refusal of a waiter too late to fit an exchange is transient and never sent") {
  const boost::system::error_code too_late = coretry::http::pool_error::too_late;
  CHECK(too_late.category().name() == std::string("coretry.http.pool"));
  CHECK(too_late.message().find("too late") != std::string::npos);
  const auto v = classify_exchange({}, failed_at(stage::waiting_for_connection, too_late));
  CHECK(v.status == attempt_status::transient);
  CHECK(v.delivered == delivery::never_sent);
  CHECK(v.category == "pool_too_late");
  CHECK(v.overload); // a concurrency limit takes it as a drop
}

TEST_CASE("classify: idempotent methods per RFC 9110") {
  for (auto m : {beast_http::verb::get, beast_http::verb::head, beast_http::verb::options, beast_http::verb::trace,
                 beast_http::verb::put, beast_http::verb::delete_})
    CHECK(coretry::http::is_idempotent(m));
  for (auto m : {beast_http::verb::post, beast_http::verb::patch, beast_http::verb::connect})
    CHECK_FALSE(coretry::http::is_idempotent(m));
}

TEST_CASE("classify: dates before 1900 are dates, and a Date the clock cannot hold is no reference") {
  exchange x = answered(503);
  x.received_at = *coretry::http::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT");
  x.res->set(beast_http::field::date, "Sun, 31 Dec 1899 23:59:50 GMT");
  x.res->set(beast_http::field::retry_after, "Mon, 01 Jan 1900 00:00:02 GMT");
  CHECK(coretry::http::server_delay(x) == coretry::duration(12s)); // from the server's own 1899 clock
  // A Date before the clock's range is not a reference; the local arrival
  // time is, and the Retry-After date is long past: no wait.
  x.res->set(beast_http::field::date, "Mon, 01 Jan 1000 00:00:00 GMT");
  x.res->set(beast_http::field::retry_after, "Mon, 01 Jan 1000 00:00:02 GMT");
  CHECK(coretry::http::server_delay(x) == coretry::duration(0s));
  // The same for a Date after it: measured from the arrival time, 2262 is far.
  x.res->set(beast_http::field::date, "Fri, 31 Dec 9999 23:59:59 GMT");
  x.res->set(beast_http::field::retry_after, "Sun, 06 Nov 1994 08:50:07 GMT");
  CHECK(coretry::http::server_delay(x) == coretry::duration(30s));
}

TEST_CASE("classify: a 5xx body rule searches a 1 MiB body without recursion") {
  using coretry::http::letter_case;
  const auto rule = coretry::http::permanent_5xx_when_body_matches("error.*HTTP 4[0-9][0-9]", letter_case::insensitive);
  exchange x = answered(503);
  // A body std::regex's recursive matcher overflows the stack on: one long
  // line the pattern's `.*` runs over, and no match at its end.
  std::string body(1 << 20, 'a');
  body.replace(0, 5, "ERROR");
  x.res->body() = body;
  CHECK_FALSE(rule({}, x).has_value());
  CHECK(classify_exchange({}, x).status == attempt_status::transient);

  body.replace(body.size() - 8, 8, "http 403");
  x.res->body() = body;
  const auto v = rule({}, x);
  REQUIRE(v.has_value());
  CHECK(v->status == attempt_status::permanent);
  CHECK(v->category == "upstream_refused");

  SUBCASE("case matters unless asked otherwise") {
    const auto exact = coretry::http::permanent_5xx_when_body_matches("error.*HTTP 4[0-9][0-9]");
    CHECK_FALSE(exact({}, x).has_value());
  }
  SUBCASE("a 2xx or a 4xx with that body is not the rule's") {
    exchange ok = answered(200);
    ok.res->body() = body;
    CHECK_FALSE(rule({}, ok).has_value());
    exchange not_found = answered(404);
    not_found.res->body() = body;
    CHECK_FALSE(rule({}, not_found).has_value());
  }
  SUBCASE("a line break stops `.`") {
    exchange split = answered(503);
    split.res->body() = "error\nHTTP 404";
    CHECK_FALSE(rule({}, split).has_value());
  }
  SUBCASE("a pattern with catastrophic backtracking ends, as no match") {
    const auto nested = coretry::http::permanent_5xx_when_body_matches("(a*)*(b|c)$");
    exchange slow = answered(503);
    slow.res->body() = std::string(1 << 20, 'a');
    CHECK_FALSE(nested({}, slow).has_value());
  }
}

TEST_CASE("classify: a 5xx body rule refuses a bad pattern, or takes a predicate") {
  CHECK_THROWS_AS(coretry::http::permanent_5xx_when_body_matches("website ("), std::invalid_argument);
  CHECK_THROWS_WITH(coretry::http::permanent_5xx_when_body_matches("website ("),
                    doctest::Contains("not a valid regular expression"));
  CHECK_THROWS_AS(coretry::http::permanent_5xx_when_body_matches(""), std::invalid_argument);
  CHECK_THROWS_AS(coretry::http::permanent_5xx_when_body({}), std::invalid_argument);
  std::size_t seen = 0;
  const auto rule = coretry::http::permanent_5xx_when_body([&seen](std::string_view body) {
    seen = body.size();
    return body.find("refused") != std::string_view::npos;
  });
  exchange x = answered(502);
  x.res->body() = "upstream refused";
  REQUIRE(rule({}, x).has_value());
  CHECK(seen == x.res->body().size());
  x.res->body() = "later";
  CHECK_FALSE(rule({}, x).has_value());
}

// The library's one redaction list (coretry/http/redact.hpp), which the
// client's errors, the fault server's log and `coretry fetch` all go by.
TEST_CASE("redact: header names that carry credentials") {
  using coretry::http::is_sensitive_header;
  for (const char* name :
       {"Authorization", "proxy-authorization", "Cookie", "Set-Cookie", "X-Api-Key", "api-key", "apikey",
        "X-Auth-Token", "X-Session-Id", "Ocp-Apim-Subscription-Key", "X-Master-Key", "x-functions-key",
        "OCP-APIM-SUBSCRIPTION-KEY", "X-Amz-Security-Token", "X-Hub-Signature-256", "X-Client-Secret",
        "X-Password", "X-Goog-Credential"})
    CHECK_MESSAGE(is_sensitive_header(name), std::string{name});
  for (const char* name : {"Content-Type", "Idempotency-Key", "idempotency-key", "X-Request-Id", "Accept",
                           "X-Trace", "Passenger", "X-Sig", "Keep-Alive"})
    CHECK_MESSAGE(!is_sensitive_header(name), std::string{name});
  CHECK(is_sensitive_header(std::string(300, 'x'))); // too long to check: hidden
}

TEST_CASE("redact: query parameters that carry credentials") {
  using coretry::http::is_sensitive_query_parameter;
  for (const char* name : {"api_key", "KEY", "access_token", "client_secret", "password", "auth", "sessionid",
                           "cookie", "signature", "pwd", "pass", "passwd", "jwt", "sig", "X-Amz-Signature"})
    CHECK_MESSAGE(is_sensitive_query_parameter(name), std::string{name});
  for (const char* name : {"page", "q", "sort", "id", "format"})
    CHECK_MESSAGE(!is_sensitive_query_parameter(name), std::string{name});

  using coretry::http::redact_url;
  CHECK(redact_url("http://user:pw@host/path?api_key=abc&page=2") == "http://REDACTED@host/path?api_key=REDACTED&page=2");
  CHECK(redact_url("https://h/x?pwd=p1&pass=p2&jwt=eyJ.x.y&sig=s1&q=books") ==
        "https://h/x?pwd=REDACTED&pass=REDACTED&jwt=REDACTED&sig=REDACTED&q=books");
  const std::string encoded = redact_url("https://h/x?p%77d=p1&q=books"); // pwd, percent-encoded
  CHECK(encoded.find("p1") == std::string::npos);
  CHECK(encoded.find("=REDACTED&q=books") != std::string::npos);
  CHECK(redact_url("https://h/x?Subscription-Key=k&JWT=t") == "https://h/x?Subscription-Key=REDACTED&JWT=REDACTED");
  CHECK(redact_url("https://host/x") == "https://host/x");
  // Not a URL: no query, nothing before an '@'.
  CHECK(redact_url("ht tp://u:p@h/x?pwd=1") == "REDACTED@h/x");
}
