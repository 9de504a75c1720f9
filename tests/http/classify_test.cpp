// The client policy table and idempotency rules, on synthetic exchanges.

#include <coretry/http/classify.hpp>
#include <coretry/http/retry_after.hpp>

#include <boost/asio/error.hpp>
#include <boost/beast/http/error.hpp>

#include <doctest/doctest.h>

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

TEST_CASE("classify: idempotent methods per RFC 9110") {
  for (auto m : {beast_http::verb::get, beast_http::verb::head, beast_http::verb::options, beast_http::verb::trace,
                 beast_http::verb::put, beast_http::verb::delete_})
    CHECK(coretry::http::is_idempotent(m));
  for (auto m : {beast_http::verb::post, beast_http::verb::patch, beast_http::verb::connect})
    CHECK_FALSE(coretry::http::is_idempotent(m));
}
