#include "faults/fault_script.hpp"
#include "faults/imf_fixdate.hpp"

#include <coretry/http/retry_after.hpp>

#include <doctest/doctest.h>

#include <string>
#include <string_view>

namespace {

using namespace std::chrono_literals;
using coretry::faults::parse_sequence_script;
using coretry::faults::parse_status_script;
using coretry::faults::response_fate;
using coretry::faults::response_plan;
using coretry::faults::script_error;
using std::chrono::system_clock;

const system_clock::time_point rfc_example{std::chrono::seconds{784111777}}; // Sun, 06 Nov 1994 08:49:37 GMT

std::string status_script_error(std::string_view code, std::string_view query) {
  try {
    parse_status_script(code, query, rfc_example);
  } catch (const script_error& error) {
    return error.what();
  }
  return "(accepted)";
}

std::string sequence_script_error(std::string_view query) {
  try {
    parse_sequence_script(query, rfc_example);
  } catch (const script_error& error) {
    return error.what();
  }
  return "(accepted)";
}

} // namespace

TEST_SUITE("fault script") {

TEST_CASE("IMF-fixdate formatting is exact and round-trips through the project's parser") {
  CHECK(coretry::faults::format_imf_fixdate(rfc_example) == "Sun, 06 Nov 1994 08:49:37 GMT");
  CHECK(coretry::faults::format_imf_fixdate(rfc_example + 999ms) == "Sun, 06 Nov 1994 08:49:37 GMT");
  CHECK(coretry::faults::format_imf_fixdate(system_clock::time_point{}) == "Thu, 01 Jan 1970 00:00:00 GMT");
  const auto leap_day = system_clock::time_point{std::chrono::sys_days{std::chrono::year{2024} / 2 / 29}} + 23h + 59min;
  CHECK(coretry::faults::format_imf_fixdate(leap_day) == "Thu, 29 Feb 2024 23:59:00 GMT");
  const auto parsed = coretry::http::parse_http_date(coretry::faults::format_imf_fixdate(leap_day));
  REQUIRE(parsed.has_value());
  CHECK(*parsed == leap_day);
}

TEST_CASE("status options fill the plan") {
  const response_plan plan = parse_status_script(
      "503", "retry-after=120&retry-after-date=%2B5&header=X-Trace:%20abc%20&body=hello%20world&delay=25", rfc_example);
  CHECK(plan.status == 503);
  REQUIRE(plan.headers.size() == 3);
  CHECK(plan.headers[0].name == "Retry-After");
  CHECK(plan.headers[0].value == "120");
  CHECK(plan.headers[1].value == "Sun, 06 Nov 1994 08:49:42 GMT");
  CHECK(plan.headers[2].name == "X-Trace");
  CHECK(plan.headers[2].value == "abc");
  CHECK(plan.body == "hello world");
  CHECK(plan.delay == 25ms);
  CHECK(plan.fate == response_fate::complete);
}

TEST_CASE("a literal plus sign stays a plus, and past dates are allowed") {
  CHECK(parse_status_script("429", "retry-after-date=+5", rfc_example).headers.at(0).value ==
        "Sun, 06 Nov 1994 08:49:42 GMT");
  CHECK(parse_status_script("429", "retry-after-date=-7", rfc_example).headers.at(0).value ==
        "Sun, 06 Nov 1994 08:49:30 GMT");
  CHECK(parse_status_script("200", "body=1+1", rfc_example).body == "1+1");
}

TEST_CASE("retry-after is sent verbatim, invalid values included") {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"soon", "soon"}, {"-1", "-1"}, {"1.5", "1.5"}, {"", ""}, {"%20%203", "  3"}};
  for (const auto& [value, expected] : cases) {
    CAPTURE(value);
    const response_plan plan = parse_status_script("503", "retry-after=" + std::string{value}, rfc_example);
    REQUIRE(plan.headers.size() == 1);
    CHECK(plan.headers[0].value == expected);
  }
}

TEST_CASE("fates and their parameters") {
  const response_plan drip = parse_status_script("200", "drip=5:20", rfc_example);
  CHECK(drip.fate == response_fate::drip);
  CHECK(drip.drip_bytes == 5);
  CHECK(drip.drip_interval == 20ms);
  CHECK(parse_status_script("200", "hang-after-headers", rfc_example).fate == response_fate::hang_after_headers);
  CHECK(parse_status_script("500", "close&delay=10", rfc_example).fate == response_fate::close);
  CHECK(parse_status_script("500", "reset", rfc_example).fate == response_fate::reset);
  CHECK(parse_status_script("204", "reset", rfc_example).fate == response_fate::reset);
}

TEST_CASE("steps: a code then options, bare keywords and encoded separators") {
  const auto steps = parse_sequence_script("steps=429;retry-after=1,502,close,reset,200;delay=50,hang-after-headers,"
                                           "200;body=a%2Cb%3Bc",
                                           rfc_example);
  REQUIRE(steps.size() == 7);
  CHECK(steps[0].status == 429);
  CHECK(steps[0].headers.at(0).value == "1");
  CHECK(steps[1].status == 502);
  CHECK(steps[1].headers.empty());
  CHECK(steps[2].fate == response_fate::close);
  CHECK(steps[3].fate == response_fate::reset);
  CHECK(steps[4].status == 200);
  CHECK(steps[4].delay == 50ms);
  CHECK(steps[5].status == 200);
  CHECK(steps[5].fate == response_fate::hang_after_headers);
  CHECK(steps[6].body == "a,b;c");
}

TEST_CASE("percent=P is the share of requests that follow a status script") {
  CHECK(parse_status_script("503", "", rfc_example).percent == 100);
  CHECK(parse_status_script("503", "percent=50", rfc_example).percent == 50);
  CHECK(parse_status_script("503", "percent=0", rfc_example).percent == 0);
  CHECK(status_script_error("503", "percent=101").find("percent") != std::string::npos);
  CHECK(status_script_error("503", "percent=-1").find("percent") != std::string::npos);
  CHECK(status_script_error("503", "percent").find("needs a value") != std::string::npos);
  CHECK(sequence_script_error("steps=503;percent=50") ==
        "step 1: 'percent' applies to /status scripts only, not to sequence steps");
}

TEST_CASE("bad status scripts name their problem") {
  CHECK(status_script_error("abc", "") == "status code 'abc' is not a number");
  CHECK(status_script_error("600", "") == "status code '600' is outside 100-599");
  CHECK(status_script_error("99", "") == "status code '99' is outside 100-599");
  CHECK(status_script_error("0200", "") == "status code '0200' is outside 100-599");
  CHECK(status_script_error("200", "frobnicate") == "unknown option 'frobnicate'");
  CHECK(status_script_error("200", "drip=5") == "drip must be N:MS (bytes:milliseconds), got '5'");
  CHECK(status_script_error("200", "drip=x:5").find("drip's byte count") != std::string::npos);
  CHECK(status_script_error("200", "drip=5:-1").find("drip's interval") != std::string::npos);
  CHECK(status_script_error("200", "delay=-1").find("delay must be a whole number") != std::string::npos);
  CHECK(status_script_error("200", "delay=99999999999999999999").find("delay") != std::string::npos);
  CHECK(status_script_error("200", "delay").find("needs a value") != std::string::npos);
  CHECK(status_script_error("200", "close=1") == "option 'close' takes no value");
  CHECK(status_script_error("200", "close&reset") == "'close' and 'reset' cannot be combined");
  CHECK(status_script_error("200", "drip=1:1&hang-after-headers").find("cannot be combined") != std::string::npos);
  CHECK(status_script_error("200", "drip=1:1&body=x").find("cannot be combined") != std::string::npos);
  CHECK(status_script_error("204", "body=x") == "status 204 has no body, so 'body' cannot apply");
  CHECK(status_script_error("304", "drip=1:1").find("has no body") != std::string::npos);
  CHECK(status_script_error("200", "header=NoColon").find("NAME:VALUE") != std::string::npos);
  CHECK(status_script_error("200", "header=Bad%20Name:x").find("not a valid field name") != std::string::npos);
  CHECK(status_script_error("200", "header=X:a%0D%0AInjected:1").find("CR, LF or NUL") != std::string::npos);
  CHECK(status_script_error("200", "retry-after=1%0A").find("CR, LF or NUL") != std::string::npos);
  CHECK(status_script_error("200", "retry-after-date=tomorrow").find("retry-after-date") != std::string::npos);
  CHECK(status_script_error("200", "body=%zz").find("malformed percent-encoding") != std::string::npos);
  CHECK(status_script_error("200", "body=%4").find("malformed percent-encoding") != std::string::npos);
}

TEST_CASE("bad sequence scripts name the step and the problem") {
  CHECK(sequence_script_error("") == "missing 'steps' parameter (steps=STEP,STEP,...)");
  CHECK(sequence_script_error("steps") == "'steps' needs a value (steps=...)");
  CHECK(sequence_script_error("steps=200&steps=500") == "'steps' is given more than once");
  CHECK(sequence_script_error("steps=200&delay=5").find("unknown parameter 'delay'") != std::string::npos);
  CHECK(sequence_script_error("steps=200,frobnicate") == "step 2: unknown option 'frobnicate'");
  CHECK(sequence_script_error("steps=200,42x") == "step 2: status code '42x' is not a number");
  CHECK(sequence_script_error("steps=700") == "step 1: status code '700' is outside 100-599");
  CHECK(sequence_script_error("steps=200,,500") == "step 2: the step is empty");
  CHECK(sequence_script_error("steps=200;;close") == "step 1: empty option in '200;;close'");
  CHECK(sequence_script_error("steps=200;drip=5") == "step 1: drip must be N:MS (bytes:milliseconds), got '5'");
}

} // TEST_SUITE
