// Fuzzes the path from a server's bytes to a retry verdict: Beast's response
// parser with the client's limits, then classify_exchange, server_delay and
// the bundled classifier extensions, as the client applies them to what it
// read. A parse failure is classified as the client records it (the parser's
// error, no response).

#include "fuzz_check.hpp"

#include <coretry/http/classify.hpp>
#include <coretry/http/exchange.hpp>
#include <coretry/http/retry_after.hpp>
#include <coretry/stop_reason.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

namespace {

using namespace coretry_fuzz;

namespace beast_http = boost::beast::http;
using coretry::attempt_status;
using coretry::delivery;
using coretry::verdict;
using std::chrono::system_clock;

// The client's default header limit; a body limit far above any input the
// fuzzer makes, so that only a declared Content-Length can exceed it.
constexpr std::uint32_t header_limit = 8 * 1024;
constexpr std::uint64_t body_limit = 1024 * 1024;

struct parse_result {
  std::optional<coretry::http::response> res;
  boost::system::error_code error;
};

// Feeds the whole input, then end of stream, as beast::http::read does when
// the peer sends these bytes and closes.
parse_result parse_response(std::string_view bytes) {
  beast_http::response_parser<beast_http::string_body> parser;
  parser.header_limit(header_limit);
  parser.body_limit(body_limit);
  parser.eager(true);
  boost::system::error_code ec;
  std::size_t consumed = 0;
  while (!parser.is_done()) {
    const auto rest = boost::asio::buffer(bytes.data() + consumed, bytes.size() - consumed);
    const std::size_t used = rest.size() == 0 ? 0 : parser.put(rest, ec);
    consumed += used;
    if (ec == beast_http::error::need_more) ec = {};
    if (ec) break;
    if (used == 0) {
      // No progress on what is left: nothing more will arrive, the peer closed.
      if (parser.got_some())
        parser.put_eof(ec);
      else
        ec = beast_http::error::end_of_stream;
      break;
    }
  }
  if (!ec && !parser.is_done()) ec = beast_http::error::partial_message;
  if (ec) return {std::nullopt, ec};
  return {parser.release(), {}};
}

bool same(const verdict& a, const verdict& b) {
  return a.status == b.status && a.delivered == b.delivered && a.server_delay == b.server_delay &&
         a.category == b.category;
}

// The Retry-After rule as documented: 429, 503 and 413 only; the first
// Retry-After field; an HTTP-date measured from the first Date field when it
// parses, else from the time the response arrived.
std::optional<coretry::duration> documented_server_delay(const coretry::http::exchange& x) {
  const unsigned status = x.res->result_int();
  if (status != 429 && status != 503 && status != 413) return std::nullopt;
  const auto retry_after = x.res->find(beast_http::field::retry_after);
  if (retry_after == x.res->end()) return std::nullopt;
  system_clock::time_point reference = x.received_at;
  if (const auto date = x.res->find(beast_http::field::date); date != x.res->end())
    // A Date the clock cannot hold (saturated) is documented as no reference.
    if (const auto server_now = coretry::http::parse_http_date(date->value());
        server_now && *server_now != system_clock::time_point::min() && *server_now != system_clock::time_point::max())
      reference = *server_now;
  return coretry::http::parse_retry_after(retry_after->value(), reference);
}

void check_common(const verdict& v) {
  FUZZ_CHECK(!v.category.empty());
  if (v.server_delay) FUZZ_CHECK(v.server_delay->count() >= 0);
  if (v.server_delay) FUZZ_CHECK(v.status == attempt_status::transient);
}

void check_parse_failure(boost::system::error_code parse_error) {
  coretry::http::exchange x;
  x.error = parse_error;
  x.reached = coretry::http::stage::reading;
  x.bytes_written = 64; // the request went out
  const verdict v = coretry::http::classify_exchange({}, x);
  check_common(v);
  FUZZ_CHECK(v.status != attempt_status::success);
  FUZZ_CHECK(!v.server_delay);
  if (parse_error == beast_http::error::header_limit || parse_error == beast_http::error::body_limit) {
    FUZZ_CHECK(v.status == attempt_status::permanent && v.category == "response_too_large");
  } else if (parse_error == beast_http::error::end_of_stream || parse_error == beast_http::error::partial_message) {
    // The request was sent: whether the server acted on it is unknown.
    FUZZ_CHECK(v.status == attempt_status::transient && v.category == "connection_closed");
    FUZZ_CHECK(v.delivered == delivery::unknown);
  } else {
    FUZZ_CHECK(v.status == attempt_status::permanent && v.category == "bad_response");
  }
}

const coretry::http::classifier_extension& out_of_credits() {
  static const auto extension = coretry::http::permanent_429_when_header("x-api-remaining-credits", "0");
  return extension;
}

// Whether `body` holds "website returned HTTP 4" and two digits, letters in
// either case: what the pattern below means.
bool mentions_refusal(std::string_view body) {
  constexpr std::string_view phrase = "website returned http 4";
  const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  for (std::size_t at = 0; at + phrase.size() + 2 <= body.size(); ++at) {
    std::size_t i = 0;
    while (i < phrase.size() && lower(body[at + i]) == phrase[i]) ++i;
    if (i == phrase.size() && digit(body[at + i]) && digit(body[at + i + 1])) return true;
  }
  return false;
}

// The pattern the demo and the tests use.
const coretry::http::classifier_extension& upstream_refused() {
  static const auto extension = coretry::http::permanent_5xx_when_body_matches(
      "website returned HTTP 4[0-9][0-9]", coretry::http::letter_case::insensitive);
  return extension;
}

void check_response(coretry::http::exchange& x) {
  const unsigned status = x.res->result_int();
  const verdict v = coretry::http::classify_exchange({}, x);
  check_common(v);
  FUZZ_CHECK(same(coretry::http::classify_exchange({}, x), v)); // deterministic

  const std::optional<coretry::duration> delay = coretry::http::server_delay(x);
  FUZZ_CHECK(delay == documented_server_delay(x));
  if (delay) FUZZ_CHECK(delay->count() >= 0);

  if (status < 100 || status > 599) {
    FUZZ_CHECK(v.status == attempt_status::permanent && v.category == "bad_status");
  } else if (status >= 200 && status < 300) {
    FUZZ_CHECK(v.status == attempt_status::success && v.category == "http_2xx" && !v.server_delay);
  } else if (status == 408 || status == 500 || status == 502 || status == 504) {
    FUZZ_CHECK(v.status == attempt_status::transient && !v.server_delay);
  } else if (status == 429 || status == 503) {
    FUZZ_CHECK(v.status == attempt_status::transient && v.server_delay == delay);
  } else if (status == 413) {
    FUZZ_CHECK((v.status == attempt_status::transient) == delay.has_value() && v.server_delay == delay);
  } else {
    FUZZ_CHECK(v.status == attempt_status::permanent && v.category.starts_with("http_"));
  }
  // An HTTP status is a definite answer, whatever it says.
  FUZZ_CHECK(v.delivered == delivery::answered);

  // The extensions decide only what they are about.
  if (const auto decided = out_of_credits()({}, x)) {
    check_common(*decided);
    FUZZ_CHECK(status == 429 && decided->status == attempt_status::permanent);
    FUZZ_CHECK(x.res->find("x-api-remaining-credits")->value() == "0");
  }
  if (const auto decided = upstream_refused()({}, x)) {
    check_common(*decided);
    FUZZ_CHECK(status >= 500 && status <= 599 && decided->status == attempt_status::permanent);
  }
  // The body rule against a search written here without regular expressions.
  FUZZ_CHECK(upstream_refused()({}, x).has_value() ==
             (status >= 500 && status <= 599 && mentions_refusal(x.res->body())));

  // A validation problem makes any response permanent; a transport error
  // takes precedence over the response.
  x.problem = "rejected by the response-validation hook";
  const verdict invalid = coretry::http::classify_exchange({}, x);
  check_common(invalid);
  FUZZ_CHECK(invalid.status == attempt_status::permanent && invalid.category == "invalid_response");
  x.problem.clear();
  const verdict timed_out = coretry::http::classify_exchange(coretry::attempt_error::timed_out, x);
  check_common(timed_out);
  FUZZ_CHECK(timed_out.status == attempt_status::transient && timed_out.category == "timeout");
}

constexpr system_clock::time_point at(std::int64_t ns) {
  return system_clock::time_point{std::chrono::nanoseconds{ns}};
}

// When the response arrived: an ordinary instant, and the clock's extremes.
constexpr std::array<system_clock::time_point, 3> arrival_times{
    at(1'714'564'800'250'000'000), // 2024-05-01 12:00:00.25 GMT
    system_clock::time_point::min(),
    system_clock::time_point::max(),
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input{reinterpret_cast<const char*>(data), size};
  current_input = input;

  parse_result parsed = parse_response(input);
  if (!parsed.res) {
    FUZZ_CHECK(parsed.error && parsed.error != beast_http::error::need_more);
    check_parse_failure(parsed.error);
    return 0;
  }
  coretry::http::exchange x;
  x.res = std::move(parsed.res);
  x.reached = coretry::http::stage::complete;
  x.bytes_written = 64;
  for (const auto arrival : arrival_times) {
    x.received_at = arrival;
    check_response(x);
  }
  return 0;
}
