// Fuzzes parse_retry_after and parse_http_date with arbitrary bytes, against
// reference times that include the clock's extremes and the parsed date
// itself, and checks every result against arithmetic done independently here
// in 128 bits.

#include "fuzz_check.hpp"

#include <coretry/http/retry_after.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace {

using namespace coretry_fuzz;

using std::chrono::nanoseconds;
using std::chrono::system_clock;
using time_point = system_clock::time_point;
using wide = __int128;

constexpr wide max_delay = nanoseconds::max().count();

constexpr bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

wide nanoseconds_since_epoch(time_point t) { return t.time_since_epoch().count(); }

// max(date - now, 0), saturated at nanoseconds::max().
wide expected_delay_until(wide date_ns, time_point now) {
  const wide ahead = date_ns - nanoseconds_since_epoch(now);
  if (ahead <= 0) return 0;
  return ahead > max_delay ? max_delay : ahead;
}

// The value of an all-digit delay-seconds, saturated at nanoseconds::max().
wide expected_delay_seconds(std::string_view digits) {
  wide seconds = 0;
  for (char c : digits) {
    seconds = seconds * 10 + (c - '0');
    if (seconds > max_delay) return max_delay; // stays saturated: no need to read on
  }
  const wide delay = seconds * 1'000'000'000;
  return delay > max_delay ? max_delay : delay;
}

int year_of(time_point t) {
  return static_cast<int>(std::chrono::year_month_day{std::chrono::floor<std::chrono::days>(t)}.year());
}

// The full year a two-digit RFC 850 year means seen from `reference_year`
// (RFC 9110 §5.6.7): the one in [reference - 49, reference + 50].
int rfc850_year(int two_digits, int reference_year) {
  const int lowest = reference_year - 49;
  return lowest + ((two_digits - lowest) % 100 + 100) % 100;
}

// The IMF-fixdate meaning the same instant as an RFC 850 date seen from
// `reference_year`: `text` is a trimmed, valid RFC 850 date such as
// "Sunday, 06-Nov-94 08:49:37 GMT". The weekday is not checked by the parser,
// so any name will do.
std::string as_imf_fixdate(std::string_view text, int reference_year) {
  const std::size_t comma = text.find(", ");
  const std::string_view day = text.substr(comma + 2, 2);
  const std::string_view month = text.substr(comma + 5, 3);
  const int two_digits = (text[comma + 9] - '0') * 10 + (text[comma + 10] - '0');
  const std::string_view time_and_zone = text.substr(comma + 11); // " 08:49:37 GMT"
  char year[8];
  std::snprintf(year, sizeof year, "%04d", rfc850_year(two_digits, reference_year));
  return "Mon, " + std::string{day} + " " + std::string{month} + " " + year + std::string{time_and_zone};
}

// The three forms differ at the fourth character: "Sun," (IMF-fixdate),
// "Sun " (asctime), "Sunday," (RFC 850).
bool is_rfc850_form(std::string_view trimmed_date) { return trimmed_date[3] != ',' && trimmed_date[3] != ' '; }

// Everything parse_retry_after(input, now) must satisfy.
void check_retry_after(std::string_view input, time_point now, const std::optional<time_point>& date) {
  const std::optional<nanoseconds> delay = coretry::http::parse_retry_after(input, now);
  FUZZ_CHECK(coretry::http::parse_retry_after(input, now) == delay); // deterministic
  if (delay) FUZZ_CHECK(delay->count() >= 0);

  const std::string_view text = trim(input);
  if (text.empty()) {
    FUZZ_CHECK(!delay);
    return;
  }
  if (is_ascii_digit(text.front())) {
    const bool all_digits = text.find_first_not_of("0123456789") == std::string_view::npos;
    FUZZ_CHECK(delay.has_value() == all_digits);
    if (all_digits) FUZZ_CHECK(delay->count() == expected_delay_seconds(text));
    return;
  }
  if (!date) {
    // Only an RFC 850 date, whose century depends on `now`, can be valid here
    // while invalid for parse_http_date (29 Feb of a year that is leap in one
    // century and not in the other).
    if (delay) FUZZ_CHECK(is_rfc850_form(text));
  }
  if (date && !is_rfc850_form(text)) {
    FUZZ_CHECK(delay.has_value());
    if (*date == time_point::max()) {
      // Saturated: the real date lies beyond time_point::max().
      FUZZ_CHECK(delay->count() >= expected_delay_until(nanoseconds_since_epoch(time_point::max()) + 1, now));
    } else if (*date == time_point::min()) {
      // Saturated: the real date lies before time_point::min(), so before any
      // `now`: long past, no wait.
      FUZZ_CHECK(delay->count() == 0);
    } else {
      FUZZ_CHECK(delay->count() == expected_delay_until(nanoseconds_since_epoch(*date), now));
    }
  }
  if (delay && is_rfc850_form(text)) {
    // Resolving the century here and parsing the equivalent IMF-fixdate must
    // give the same delay, whatever year `now` is in.
    FUZZ_CHECK(coretry::http::parse_retry_after(as_imf_fixdate(text, year_of(now)), now) == delay);
  }
}

constexpr time_point at(std::int64_t ns) { return time_point{nanoseconds{ns}}; }

// Reference times: the clock's extremes, around the epoch, and ordinary
// instants with a fraction of a second (2019 makes the RFC 850 window equal
// to parse_http_date's fixed 1970-2069 one).
constexpr std::array<time_point, 8> fixed_references{
    time_point::min(),
    time_point::max(),
    at(0),
    at(-1),
    at(784'111'777'500'000'000),   // Sun, 06 Nov 1994 08:49:37.5 GMT
    at(1'560'600'000'123'456'789), // 2019-06-15
    at(1'709'251'199'999'999'999), // Thu, 29 Feb 2024 23:59:59.999999999 GMT
    at(4'102'444'800'000'000'001), // 2100-01-01, just after midnight
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input{reinterpret_cast<const char*>(data), size};
  current_input = input;

  const std::optional<time_point> date = coretry::http::parse_http_date(input);
  FUZZ_CHECK(coretry::http::parse_http_date(input) == date); // deterministic
  const std::string padded = " \t" + std::string{input} + "\t ";
  FUZZ_CHECK(coretry::http::parse_http_date(padded) == date); // optional whitespace
  if (date) {
    const std::string_view text = trim(input);
    FUZZ_CHECK(!text.empty() && !is_ascii_digit(text.front()));
    // Whole seconds, any year 0000-9999, saturating at both ends of the clock.
    FUZZ_CHECK(nanoseconds_since_epoch(*date) % 1'000'000'000 == 0 || *date == time_point::max() ||
               *date == time_point::min());
  }

  for (const time_point now : fixed_references) {
    check_retry_after(input, now, date);
    FUZZ_CHECK(coretry::http::parse_retry_after(padded, now) == coretry::http::parse_retry_after(input, now));
  }

  if (date && *date != time_point::max() && *date != time_point::min()) {
    // A date is not in the future of itself; one nanosecond earlier it is
    // exactly one nanosecond away.
    FUZZ_CHECK(coretry::http::parse_retry_after(input, *date) == nanoseconds::zero());
    FUZZ_CHECK(coretry::http::parse_retry_after(input, *date - nanoseconds{1}) == nanoseconds{1});
    FUZZ_CHECK(coretry::http::parse_retry_after(input, *date + nanoseconds{1}) == nanoseconds::zero());
    for (const time_point now : {*date, *date - nanoseconds{1}, *date + nanoseconds{1}})
      check_retry_after(input, now, date);
  }
  return 0;
}
