// Fuzzes the fault server's script language. The input reads as the part of
// a request target after "/status/" or "/seq/": `SEGMENT?QUERY`, where
// SEGMENT is the status code for /status (and the ignored name for /seq).
// Every parser must either return a plan that the server can send safely or
// throw script_error; any other exception is a failure.

#include "fuzz_check.hpp"

#include "faults/fault_script.hpp"
#include "faults/imf_fixdate.hpp"

#include <coretry/http/retry_after.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

namespace {

using namespace coretry_fuzz;

using coretry::faults::response_fate;
using coretry::faults::response_plan;
using coretry::faults::script_error;
using std::chrono::system_clock;

// Runs `parse`; a script_error is an accepted answer, anything else escaping
// it is reported with the input and ends the run.
template <class Parse> void expect_plan_or_script_error(const char* what, Parse parse) {
  try {
    parse();
  } catch (const script_error& error) {
    FUZZ_CHECK(error.what()[0] != '\0'); // what() names the problem
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s threw %s, not script_error: %s\n", what, typeid(error).name(), error.what());
    print_input();
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "%s threw something that is not a std::exception\n", what);
    print_input();
    std::abort();
  }
}

// A fixed, ordinary time: the server's own clock reading.
const system_clock::time_point now{std::chrono::nanoseconds{1'714'564'800'250'000'000}}; // 2024-05-01 12:00:00.25

constexpr bool is_token_char(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view{"!#$%&'*+-.^_`|~"}.find(c) != std::string_view::npos;
}

// What the server relies on to write the plan as a well-framed response.
void check_plan(const response_plan& plan) {
  FUZZ_CHECK(plan.status >= 100 && plan.status <= 599);
  FUZZ_CHECK(plan.delay >= std::chrono::milliseconds{0} && plan.delay <= std::chrono::hours{1});
  if (plan.fate == response_fate::drip) {
    FUZZ_CHECK(!plan.body);
    FUZZ_CHECK(plan.drip_bytes <= 1024 * 1024);
    FUZZ_CHECK(plan.drip_interval >= std::chrono::milliseconds{0} && plan.drip_interval <= std::chrono::minutes{1});
  } else {
    FUZZ_CHECK(plan.drip_bytes == 0 && plan.drip_interval == std::chrono::milliseconds{0});
  }
  if (!coretry::faults::status_has_body(plan.status)) {
    FUZZ_CHECK(!plan.body);
    FUZZ_CHECK(plan.fate != response_fate::drip && plan.fate != response_fate::hang_after_headers);
  }
  for (const auto& field : plan.headers) {
    FUZZ_CHECK(!field.name.empty() && std::all_of(field.name.begin(), field.name.end(), is_token_char));
    FUZZ_CHECK(field.value.find_first_of(std::string_view{"\r\n\0", 3}) == std::string::npos);
  }
}

// Encodes every byte, hex digits in upper or lower case by turns.
std::string percent_encode_all(std::string_view text) {
  static constexpr char upper[] = "0123456789ABCDEF";
  static constexpr char lower[] = "0123456789abcdef";
  std::string encoded;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const char* digits = i % 2 == 0 ? upper : lower;
    encoded += '%';
    encoded += digits[byte >> 4];
    encoded += digits[byte & 0xf];
  }
  return encoded;
}

void check_percent_decode(std::string_view input) {
  expect_plan_or_script_error("percent_decode", [&] {
    const std::string decoded = coretry::faults::percent_decode(input);
    FUZZ_CHECK(decoded.size() <= input.size());
    if (input.find('%') == std::string_view::npos) FUZZ_CHECK(decoded == input);
  });
  // Any bytes, fully encoded, decode back to themselves.
  expect_plan_or_script_error("percent_decode of an encoding", [&] {
    FUZZ_CHECK(coretry::faults::percent_decode(percent_encode_all(input)) == input);
  });
}

// retry-after-date writes now + offset as an IMF-fixdate; the client's parser
// must read back exactly that second. The offset comes from the input, within
// the script's bound of 100 years either way.
void check_date_round_trip(std::string_view input) {
  constexpr std::int64_t max_offset_seconds = 100ll * 366 * 24 * 3600;
  std::uint64_t bits = 0;
  for (std::size_t i = 0; i < input.size() && i < 8; ++i)
    bits = bits << 8 | static_cast<unsigned char>(input[i]);
  const auto offset = static_cast<std::int64_t>(bits % (2 * max_offset_seconds + 1)) - max_offset_seconds;
  const auto instant = now + std::chrono::seconds{offset};
  const auto parsed = coretry::http::parse_http_date(coretry::faults::format_imf_fixdate(instant));
  FUZZ_CHECK(parsed && *parsed == std::chrono::floor<std::chrono::seconds>(instant));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input{reinterpret_cast<const char*>(data), size};
  current_input = input;

  const std::size_t question_mark = input.find('?');
  const std::string_view segment = input.substr(0, question_mark);
  const std::string_view query = question_mark == std::string_view::npos ? "" : input.substr(question_mark + 1);

  expect_plan_or_script_error("parse_status_script", [&] {
    const response_plan plan = coretry::faults::parse_status_script(segment, query, now);
    check_plan(plan);
    FUZZ_CHECK(std::to_string(plan.status) == segment); // the code is the segment, exactly
  });
  expect_plan_or_script_error("parse_sequence_script", [&] {
    const std::vector<response_plan> plans = coretry::faults::parse_sequence_script(query, now);
    FUZZ_CHECK(!plans.empty());
    for (const response_plan& plan : plans) check_plan(plan);
  });
  check_percent_decode(input);
  check_date_round_trip(input);
  return 0;
}
