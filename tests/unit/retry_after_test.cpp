#include <coretry/http/retry_after.hpp>

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>

namespace {

using namespace std::chrono_literals;
using coretry::http::parse_http_date;
using coretry::http::parse_retry_after;
using std::chrono::nanoseconds;
using std::chrono::seconds;
using std::chrono::system_clock;

constexpr std::int64_t rfc_example_unix_seconds = 784111777; // 1994-11-06 08:49:37 UTC

system_clock::time_point unix_time(std::int64_t unix_seconds) {
  return system_clock::time_point{std::chrono::duration_cast<system_clock::duration>(seconds{unix_seconds})};
}

// Results are compared as tick counts so that failures print numbers.
std::int64_t ticks(system_clock::time_point instant) { return instant.time_since_epoch().count(); }

void check_date(std::string_view text, std::int64_t expected_unix_seconds) {
  CAPTURE(text);
  const auto parsed = parse_http_date(text);
  REQUIRE(parsed.has_value());
  CHECK(ticks(*parsed) == ticks(unix_time(expected_unix_seconds)));
}

void check_date_rejected(std::string_view text) {
  CAPTURE(text);
  CHECK_FALSE(parse_http_date(text).has_value());
}

void check_delay(std::string_view text, system_clock::time_point now, nanoseconds expected) {
  CAPTURE(text);
  const auto delay = parse_retry_after(text, now);
  REQUIRE(delay.has_value());
  CHECK(delay->count() == expected.count());
}

void check_retry_after_rejected(std::string_view text, system_clock::time_point now = unix_time(0)) {
  CAPTURE(text);
  CHECK_FALSE(parse_retry_after(text, now).has_value());
}

constexpr std::array<const char*, 7> short_day_names_from_sunday{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
constexpr std::array<const char*, 7> full_day_names_from_sunday{"Sunday",   "Monday", "Tuesday", "Wednesday",
                                                                "Thursday", "Friday", "Saturday"};
constexpr std::array<const char*, 12> month_names{"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

// The three HTTP-date forms of a broken-down UTC time, written independently
// of the parser.
struct formatted_date {
  std::string imf_fixdate;
  std::string rfc850;
  std::string asctime;
};

formatted_date format_all_forms(const std::tm& time) {
  const char* short_day = short_day_names_from_sunday.at(static_cast<std::size_t>(time.tm_wday));
  const char* full_day = full_day_names_from_sunday.at(static_cast<std::size_t>(time.tm_wday));
  const char* month = month_names.at(static_cast<std::size_t>(time.tm_mon));
  const int year = time.tm_year + 1900;
  std::array<char, 64> buffer{};
  formatted_date result;
  std::snprintf(buffer.data(), buffer.size(), "%s, %02d %s %04d %02d:%02d:%02d GMT", short_day, time.tm_mday,
                month, year, time.tm_hour, time.tm_min, time.tm_sec);
  result.imf_fixdate = buffer.data();
  std::snprintf(buffer.data(), buffer.size(), "%s, %02d-%s-%02d %02d:%02d:%02d GMT", full_day, time.tm_mday,
                month, year % 100, time.tm_hour, time.tm_min, time.tm_sec);
  result.rfc850 = buffer.data();
  std::snprintf(buffer.data(), buffer.size(), "%s %s %2d %02d:%02d:%02d %04d", short_day, month, time.tm_mday,
                time.tm_hour, time.tm_min, time.tm_sec, year);
  result.asctime = buffer.data();
  return result;
}

} // namespace

// ---------------------------------------------------------------- HTTP-date

TEST_CASE("http-date: the three RFC example forms give the same instant") {
  check_date("Sun, 06 Nov 1994 08:49:37 GMT", rfc_example_unix_seconds);
  check_date("Sunday, 06-Nov-94 08:49:37 GMT", rfc_example_unix_seconds);
  check_date("Sun Nov  6 08:49:37 1994", rfc_example_unix_seconds);
}

TEST_CASE("http-date: Unix epoch and other fixed points") {
  check_date("Thu, 01 Jan 1970 00:00:00 GMT", 0);
  check_date("Sat, 01 Jan 2000 00:00:00 GMT", 946684800);
  check_date("Sun, 15 Mar 2026 12:00:00 GMT", 1773576000);
  check_date("Wed, 31 Dec 1969 23:59:59 GMT", -1);
}

TEST_CASE("http-date: asctime day may be space-padded or zero-padded") {
  check_date("Sun Nov 06 08:49:37 1994", rfc_example_unix_seconds);
  check_date("Wed Nov 16 00:00:00 1994", rfc_example_unix_seconds - (8 * 3600 + 49 * 60 + 37) + 10 * 86400);
  check_date_rejected("Sun Nov 6 08:49:37 1994");    // one digit needs a leading space
  check_date_rejected("Sun Nov   6 08:49:37 1994");  // too much padding
  check_date_rejected("Sun Nov  16 08:49:37 1994");  // padding before two digits
  check_date_rejected("Sun Nov  6 08:49:37 1994 GMT");
}

TEST_CASE("http-date: surrounding spaces and tabs are ignored, nothing else") {
  check_date("  Sun, 06 Nov 1994 08:49:37 GMT", rfc_example_unix_seconds);
  check_date("Sun, 06 Nov 1994 08:49:37 GMT \t", rfc_example_unix_seconds);
  check_date("\t Sun Nov  6 08:49:37 1994 \t", rfc_example_unix_seconds);
  check_date_rejected("\nSun, 06 Nov 1994 08:49:37 GMT");
  check_date_rejected("Sun, 06 Nov 1994 08:49:37 GMT\r\n");
  check_date_rejected("Sun, 06 Nov 1994 08:49:37 GMT\v");
}

TEST_CASE("http-date: leap days follow the Gregorian rule") {
  check_date("Thu, 29 Feb 2024 00:00:00 GMT", 1709164800);
  check_date("Thursday, 29-Feb-24 00:00:00 GMT", 1709164800);
  check_date("Thu Feb 29 00:00:00 2024", 1709164800);
  check_date("Tue, 29 Feb 2000 12:00:00 GMT", 951825600); // divisible by 400: leap
  check_date_rejected("Wed, 29 Feb 2023 00:00:00 GMT");
  check_date_rejected("Wednesday, 29-Feb-23 00:00:00 GMT");
  check_date_rejected("Wed Feb 29 00:00:00 2023");
  check_date_rejected("Thu, 29 Feb 1900 00:00:00 GMT"); // divisible by 100 only: not leap
  check_date_rejected("Mon, 29 Feb 2100 00:00:00 GMT");
  check_date_rejected("Fri, 30 Feb 2024 00:00:00 GMT");
  check_date_rejected("Sun Feb 30 00:00:00 2024");
}

TEST_CASE("http-date: the day must exist in its month") {
  // 2023 is a common year; the last day of each month plus one day is the
  // first of the next month, and one day more is rejected.
  constexpr std::array<int, 12> month_lengths_2023{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  for (std::size_t month = 0; month < 12; ++month) {
    const std::string name = month_names.at(month);
    const std::string last_day =
        "Mon, " + std::to_string(month_lengths_2023.at(month)) + " " + name + " 2023 00:00:00 GMT";
    const std::string day_after_last =
        "Mon, " + std::to_string(month_lengths_2023.at(month) + 1) + " " + name + " 2023 00:00:00 GMT";
    const std::string next_first =
        month == 11 ? std::string{"Mon, 01 Jan 2024 00:00:00 GMT"}
                    : "Mon, 01 " + std::string{month_names.at(month + 1)} + " 2023 00:00:00 GMT";
    CAPTURE(last_day);
    const auto last = parse_http_date(last_day);
    const auto first_of_next = parse_http_date(next_first);
    REQUIRE(last.has_value());
    REQUIRE(first_of_next.has_value());
    CHECK(ticks(*last + 24h) == ticks(*first_of_next));
    check_date_rejected(day_after_last);
  }
  check_date_rejected("Sun, 00 Jan 2023 00:00:00 GMT");
  check_date_rejected("Sun, 32 Jan 2023 00:00:00 GMT");
  check_date_rejected("Sun, 99 Jan 2023 00:00:00 GMT");
}

TEST_CASE("http-date: time-of-day fields are range-checked") {
  check_date("Sun, 06 Nov 1994 00:00:00 GMT", rfc_example_unix_seconds - (8 * 3600 + 49 * 60 + 37));
  check_date("Sun, 06 Nov 1994 23:59:59 GMT", rfc_example_unix_seconds - (8 * 3600 + 49 * 60 + 37) + 86399);
  check_date_rejected("Sun, 06 Nov 1994 24:00:00 GMT");
  check_date_rejected("Sun, 06 Nov 1994 23:60:00 GMT");
  check_date_rejected("Sun, 06 Nov 1994 23:59:61 GMT");
  check_date_rejected("Sun, 06 Nov 1994 99:99:99 GMT");
  check_date_rejected("Sunday, 06-Nov-94 24:00:00 GMT");
  check_date_rejected("Sun Nov  6 24:00:00 1994");
}

TEST_CASE("http-date: second 60 is a leap second and counts as the next second") {
  check_date("Sat, 31 Dec 2016 23:59:59 GMT", 1483228799);
  check_date("Sat, 31 Dec 2016 23:59:60 GMT", 1483228800);
  check_date("Sun, 01 Jan 2017 00:00:00 GMT", 1483228800);
  check_date("Sat Dec 31 23:59:60 2016", 1483228800);
}

TEST_CASE("http-date: day names, month names and GMT are case-sensitive") {
  check_date_rejected("sun, 06 nov 1994 08:49:37 gmt");
  check_date_rejected("SUN, 06 NOV 1994 08:49:37 GMT");
  check_date_rejected("sun, 06 Nov 1994 08:49:37 GMT");
  check_date_rejected("Sun, 06 nov 1994 08:49:37 GMT");
  check_date_rejected("Sun, 06 Nov 1994 08:49:37 gmt");
  check_date_rejected("Sun, 06 Nov 1994 08:49:37 Gmt");
  check_date_rejected("sunday, 06-Nov-94 08:49:37 GMT");
  check_date_rejected("Sun nov  6 08:49:37 1994");
}

TEST_CASE("http-date: only GMT is accepted as the zone") {
  check_date_rejected("Sun, 06 Nov 1994 08:49:37 UTC");
  check_date_rejected("Sun, 06 Nov 1994 08:49:37 UT");
  check_date_rejected("Sun, 06 Nov 1994 08:49:37 Z");
  check_date_rejected("Sun, 06 Nov 1994 08:49:37 +0000");
  check_date_rejected("Sun, 06 Nov 1994 08:49:37");
  check_date_rejected("Sunday, 06-Nov-94 08:49:37 UTC");
  check_date_rejected("Sun Nov  6 08:49:37 GMT 1994");
}

TEST_CASE("http-date: the weekday must be a valid name but need not match the date") {
  check_date("Mon, 06 Nov 1994 08:49:37 GMT", rfc_example_unix_seconds);
  check_date("Wednesday, 06-Nov-94 08:49:37 GMT", rfc_example_unix_seconds);
  check_date("Fri Nov  6 08:49:37 1994", rfc_example_unix_seconds);
  check_date_rejected("Xyz, 06 Nov 1994 08:49:37 GMT");
  check_date_rejected("Sunday, 06 Nov 1994 08:49:37 GMT"); // full name in IMF-fixdate
  check_date_rejected("Sun, 06-Nov-94 08:49:37 GMT");      // short name in RFC 850
  check_date_rejected("Sunday Nov  6 08:49:37 1994");      // full name in asctime
  check_date_rejected("Sund, 06 Nov 1994 08:49:37 GMT");
  check_date_rejected("06 Nov 1994 08:49:37 GMT");
}

TEST_CASE("http-date: every month name is recognised") {
  const std::array<std::int64_t, 12> first_of_month_1994{757382400, 760060800, 762480000, 765158400,
                                                         767750400, 770428800, 773020800, 775699200,
                                                         778377600, 780969600, 783648000, 786240000};
  for (std::size_t month = 0; month < 12; ++month)
    check_date("Sat, 01 " + std::string{month_names.at(month)} + " 1994 00:00:00 GMT",
               first_of_month_1994.at(month));
  check_date_rejected("Sat, 01 Sept 1994 00:00:00 GMT");
  check_date_rejected("Sat, 01 Foo 1994 00:00:00 GMT");
}

TEST_CASE("http-date: field widths are exact") {
  check_date_rejected("Sun, 6 Nov 1994 08:49:37 GMT");
  check_date_rejected("Sun, 006 Nov 1994 08:49:37 GMT");
  check_date_rejected("Sun, 06 Nov 94 08:49:37 GMT");
  check_date_rejected("Sun, 06 Nov 01994 08:49:37 GMT");
  check_date_rejected("Sun, 06 Nov 1994 8:49:37 GMT");
  check_date_rejected("Sun, 06 Nov 1994 08:9:37 GMT");
  check_date_rejected("Sun, 06 Nov 1994 08:49:7 GMT");
  check_date_rejected("Sun, 06 Nov 1994 08:49 GMT");
  check_date_rejected("Sunday, 6-Nov-94 08:49:37 GMT");
  check_date_rejected("Sunday, 06-Nov-1994 08:49:37 GMT");
  check_date_rejected("Sunday, 06-Nov-4 08:49:37 GMT");
  check_date_rejected("Sun Nov  6 08:49:37 94");
  check_date_rejected("Sun Nov  6 8:49:37 1994");
  check_date_rejected("Sun Nov  6 08:49:37 01994");
}

TEST_CASE("http-date: separators are exact") {
  check_date_rejected("Sun,06 Nov 1994 08:49:37 GMT");
  check_date_rejected("Sun ,06 Nov 1994 08:49:37 GMT");
  check_date_rejected("Sun,  06 Nov 1994 08:49:37 GMT");
  check_date_rejected("Sun, 06  Nov 1994 08:49:37 GMT");
  check_date_rejected("Sun, 06-Nov-1994 08:49:37 GMT");
  check_date_rejected("Sun, 06 Nov 1994 08.49.37 GMT");
  check_date_rejected("Sun, 06 Nov 1994 08:49:37  GMT");
  check_date_rejected("Sun, 06 Nov 1994\t08:49:37 GMT");
  check_date_rejected("Sunday, 06 Nov 94 08:49:37 GMT");
  check_date_rejected("Sun, Nov  6 08:49:37 1994");
}

TEST_CASE("http-date: trailing garbage and truncation are rejected") {
  check_date_rejected("Sun, 06 Nov 1994 08:49:37 GMTx");
  check_date_rejected("Sun, 06 Nov 1994 08:49:37 GMT GMT");
  check_date_rejected("Sun, 06 Nov 1994 08:49:37 GMT;");
  check_date_rejected("Sunday, 06-Nov-94 08:49:37 GMT0");
  check_date_rejected("Sun Nov  6 08:49:37 19945");
  check_date_rejected("Sun Nov  6 08:49:37 1994x");
  check_date_rejected("Sun, 06 Nov 1994 08:49:37 GM");
  check_date_rejected("Sun, 06 Nov 1994");
  check_date_rejected("Sun,");
  check_date_rejected("Sun");
  check_date_rejected("");
  check_date_rejected("   ");
  check_date_rejected(std::string_view{"Sun, 06 Nov 1994 08:49:37 GMT\0", 30});
}

TEST_CASE("http-date: only ASCII digits count") {
  check_date_rejected("Sun, \xd9\xa0\xd9\xa6 Nov 1994 08:49:37 GMT");     // Arabic-Indic 06
  check_date_rejected("Sun, 06 Nov 199\xd9\xa4 08:49:37 GMT");            // Arabic-Indic 4
  check_date_rejected("Sun, \xef\xbc\x90\xef\xbc\x96 Nov 1994 08:49:37 GMT"); // fullwidth 06
  check_date_rejected("Sun, 0x Nov 1994 08:49:37 GMT");
  check_date_rejected("Sun, -6 Nov 1994 08:49:37 GMT");
  check_date_rejected("Sun, +6 Nov 1994 08:49:37 GMT");
  check_date_rejected("Sun Nov +6 08:49:37 1994");
}

TEST_CASE("http-date: every four-digit year is accepted, the earliest saturate to time_point::min()") {
  check_date("Mon, 01 Jan 1900 00:00:00 GMT", -2208988800);
  check_date("Sun, 31 Dec 1899 23:59:59 GMT", -2208988801);
  check_date("Sun Dec 31 23:59:59 1899", -2208988801);
  check_date("Wed, 01 Jan 1800 00:00:00 GMT", -5364662400);
  constexpr auto earliest = system_clock::time_point::min();
  for (const std::string_view text : {"Sat, 01 Jan 0000 00:00:00 GMT", "Mon Jan  1 00:00:00 1000",
                                      "Tue, 29 Feb 0000 12:00:00 GMT", "Mon, 01 Jan 0001 00:00:00 GMT"}) {
    CAPTURE(text);
    const auto parsed = parse_http_date(text);
    REQUIRE(parsed.has_value());
    if constexpr (std::is_same_v<system_clock::duration, nanoseconds>) CHECK(ticks(*parsed) == ticks(earliest));
    else CHECK(ticks(*parsed) < ticks(unix_time(-2208988800)));
  }
  // Year 0 of the proleptic Gregorian calendar is a leap year, 100 is not.
  check_date_rejected("Mon, 29 Feb 0100 00:00:00 GMT");
  check_date_rejected("Sat, 01 Jan 10000 00:00:00 GMT");
  check_date_rejected("Sat, 01 Jan 999 00:00:00 GMT");
  if constexpr (std::is_same_v<system_clock::duration, nanoseconds>) {
    // The first whole second a nanosecond clock holds is 1677-09-21 00:12:44.
    check_date("Tue, 21 Sep 1677 00:12:44 GMT", -9223372036);
    const auto one_earlier = parse_http_date("Tue, 21 Sep 1677 00:12:43 GMT");
    REQUIRE(one_earlier.has_value());
    CHECK(ticks(*one_earlier) == ticks(earliest));
  }
}

TEST_CASE("http-date: dates past the clock's range saturate to time_point::max()") {
  constexpr auto latest = system_clock::time_point::max();
  const auto year_9999 = parse_http_date("Fri, 31 Dec 9999 23:59:59 GMT");
  REQUIRE(year_9999.has_value());
  CHECK(ticks(*year_9999) == ticks(latest));
  const auto year_9999_asctime = parse_http_date("Fri Dec 31 23:59:59 9999");
  REQUIRE(year_9999_asctime.has_value());
  CHECK(ticks(*year_9999_asctime) == ticks(latest));
  if constexpr (std::is_same_v<system_clock::duration, nanoseconds>) {
    // The last whole second a nanosecond clock holds is 2262-04-11 23:47:16.
    check_date("Fri, 11 Apr 2262 23:47:16 GMT", 9223372036);
    const auto one_later = parse_http_date("Fri, 11 Apr 2262 23:47:17 GMT");
    REQUIRE(one_later.has_value());
    CHECK(ticks(*one_later) == ticks(latest));
  }
}

TEST_CASE("http-date: RFC 850 two-digit years use the fixed 1970-2069 window") {
  check_date("Saturday, 01-Jan-00 00:00:00 GMT", 946684800);   // 2000
  check_date("Tuesday, 01-Jan-69 00:00:00 GMT", 3124224000);   // 2069
  check_date("Thursday, 01-Jan-70 00:00:00 GMT", 0);           // 1970
  check_date("Friday, 01-Jan-99 00:00:00 GMT", 915148800);     // 1999
  check_date("Wednesday, 06-Nov-30 08:49:37 GMT", 1920185377); // 2030
}

// Every day from 1900 through 2100, at a time of day that varies, in every
// form: covers each month end and leap day in the range.
TEST_CASE("http-date: every day from 1900 to 2100 parses in all forms") {
  constexpr std::int64_t first_day = -25567; // 1900-01-01
  constexpr std::int64_t last_day = 47846;   // 2100-12-31
  int mismatches = 0;
  for (std::int64_t day = first_day; day <= last_day; ++day) {
    const std::time_t instant = static_cast<std::time_t>(day * 86400 + (day * 7919 % 86400 + 86400) % 86400);
    std::tm fields{};
    REQUIRE(gmtime_r(&instant, &fields) != nullptr);
    const formatted_date text = format_all_forms(fields);
    const auto expected = unix_time(instant);
    const auto imf = parse_http_date(text.imf_fixdate);
    const auto asctime = parse_http_date(text.asctime);
    bool ok = imf && asctime && *imf == expected && *asctime == expected;
    if (fields.tm_year + 1900 >= 1970 && fields.tm_year + 1900 <= 2069) {
      const auto rfc850 = parse_http_date(text.rfc850);
      ok = ok && rfc850 && *rfc850 == expected;
    }
    if (!ok && ++mismatches <= 5) FAIL_CHECK("mismatch for " << text.imf_fixdate);
  }
  CHECK(mismatches == 0);
}

// Differential check against glibc: random broken-down times, some naming
// days that do not exist (day 29-31 of short months). timegm normalises those,
// which tells the test that the parser must reject them.
TEST_CASE("http-date: random dates agree with timegm") {
  std::mt19937 random{20240229};
  std::uniform_int_distribution<int> year_dist{1900, 2100};
  std::uniform_int_distribution<int> month_dist{0, 11};
  std::uniform_int_distribution<int> day_dist{1, 31};
  std::uniform_int_distribution<int> hour_dist{0, 23};
  std::uniform_int_distribution<int> minute_or_second_dist{0, 59};
  int valid_dates = 0;
  int invalid_dates = 0;
  for (int i = 0; i < 4000; ++i) {
    std::tm written{};
    written.tm_year = year_dist(random) - 1900;
    written.tm_mon = month_dist(random);
    written.tm_mday = day_dist(random);
    written.tm_hour = hour_dist(random);
    written.tm_min = minute_or_second_dist(random);
    written.tm_sec = minute_or_second_dist(random);
    std::tm normalized = written;
    const std::time_t expected_seconds = timegm(&normalized);
    written.tm_wday = normalized.tm_wday; // for nonexistent days, any valid name will do
    const bool day_exists = normalized.tm_mday == written.tm_mday;
    const formatted_date text = format_all_forms(written);
    const int year = written.tm_year + 1900;
    const bool fixed_window_year = year >= 1970 && year <= 2069;
    CAPTURE(text.imf_fixdate);

    // The RFC 850 form resolves against `now`, one day before the date.
    const auto expected = unix_time(expected_seconds);
    const auto now = expected - 24h;
    if (day_exists) {
      ++valid_dates;
      const auto imf = parse_http_date(text.imf_fixdate);
      const auto asctime = parse_http_date(text.asctime);
      REQUIRE(imf.has_value());
      REQUIRE(asctime.has_value());
      CHECK(ticks(*imf) == ticks(expected));
      CHECK(ticks(*asctime) == ticks(expected));
      if (fixed_window_year) {
        const auto rfc850 = parse_http_date(text.rfc850);
        REQUIRE(rfc850.has_value());
        CHECK(ticks(*rfc850) == ticks(expected));
      }
      for (const std::string* form : {&text.imf_fixdate, &text.rfc850, &text.asctime}) {
        CAPTURE(*form);
        const auto delay = parse_retry_after(*form, now);
        REQUIRE(delay.has_value());
        CHECK(delay->count() == nanoseconds{24h}.count());
      }
    } else {
      ++invalid_dates;
      CHECK_FALSE(parse_http_date(text.imf_fixdate).has_value());
      CHECK_FALSE(parse_http_date(text.asctime).has_value());
      CHECK_FALSE(parse_http_date(text.rfc850).has_value());
      CHECK_FALSE(parse_retry_after(text.rfc850, now).has_value());
    }
  }
  // The generator must exercise both branches.
  CHECK(valid_dates > 3000);
  CHECK(invalid_dates > 30);
}

// -------------------------------------------------------------- Retry-After

TEST_CASE("retry-after: delay-seconds gives that many seconds, whatever now is") {
  for (const auto now : {unix_time(0), unix_time(1773576000) + 123ms, system_clock::time_point::min(),
                         system_clock::time_point::max()}) {
    check_delay("120", now, 120s);
    check_delay("0", now, 0s);
    check_delay("007", now, 7s);
    check_delay("000", now, 0s);
    check_delay("1", now, 1s);
    check_delay("86400", now, 24h);
  }
}

TEST_CASE("retry-after: surrounding spaces and tabs are trimmed") {
  const auto now = unix_time(0);
  check_delay(" 120", now, 120s);
  check_delay("120 ", now, 120s);
  check_delay("\t120\t", now, 120s);
  check_delay("  \t 120 \t  ", now, 120s);
  check_delay(" Sun, 06 Nov 1994 08:49:37 GMT\t", unix_time(rfc_example_unix_seconds - 5), 5s);
}

TEST_CASE("retry-after: malformed delay-seconds are rejected") {
  for (const std::string_view text :
       {"-1", "+1", "+5", "1.5", "1.", ".5", "1e3", "1E3", "", " ", "\t", "  \t ", "12 3", "1\t2", "abc",
        "12a", "0x10", "1,000", "1_000", "120s", "\n120", "120\r\n", "\v120", "\xd9\xa3" /* Arabic-Indic 3 */,
        "1\xd9\xa3", "\xef\xbc\x91\xef\xbc\x92" /* fullwidth 12 */, "\xc2\xa0" "120" /* no-break space */}) {
    check_retry_after_rejected(text);
  }
  check_retry_after_rejected(std::string_view{"12\0" "3", 4});
  check_retry_after_rejected(std::string_view{"120\0", 4});
}

TEST_CASE("retry-after: huge delay-seconds saturate instead of overflowing") {
  const auto now = unix_time(1773576000);
  // 9223372036 s is the largest whole number of seconds nanoseconds can hold.
  check_delay("9223372036", now, 9223372036s);
  check_delay("9223372037", now, nanoseconds::max());
  check_delay("99999999999999999999999", now, nanoseconds::max());
  check_delay("18446744073709551615", now, nanoseconds::max());
  check_delay("18446744073709551616", now, nanoseconds::max());
  check_delay(std::string(1000, '9'), now, nanoseconds::max());
  check_delay("0000000000000000000000000000120", now, 120s); // leading zeros are not "huge"
  check_retry_after_rejected("99999999999999999999999x");
  check_retry_after_rejected("99999999999999999999999 1");
  check_retry_after_rejected("99999999999999999999999.5");
}

TEST_CASE("retry-after: a future date gives the exact remaining time") {
  const auto date = unix_time(rfc_example_unix_seconds);
  for (const std::string_view text :
       {"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"}) {
    check_delay(text, date - 120s, 120s);
    check_delay(text, date - 120s - 250ms, 120s + 250ms);
    check_delay(text, date - 1ns, 1ns);
    check_delay(text, date - 999999999ns, 999999999ns);
    check_delay(text, date - 10s + 1ns, 10s - 1ns);
    check_delay(text, unix_time(0), seconds{rfc_example_unix_seconds});
    check_delay(text, unix_time(-1000) + 1ms, seconds{rfc_example_unix_seconds + 1000} - 1ms);
  }
}

TEST_CASE("retry-after: a date not in the future means no extra delay") {
  const auto date = unix_time(rfc_example_unix_seconds);
  for (const std::string_view text :
       {"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"}) {
    check_delay(text, date, 0ns);
    check_delay(text, date + 1ns, 0ns);
    check_delay(text, date + 500ms, 0ns);
    check_delay(text, date + 3600s, 0ns);
  }
  check_delay("Mon, 01 Jan 1900 00:00:00 GMT", unix_time(1773576000), 0ns);
}

TEST_CASE("retry-after: invalid dates are rejected") {
  const auto now = unix_time(rfc_example_unix_seconds - 60);
  check_retry_after_rejected("sun, 06 nov 1994 08:49:37 gmt", now);
  check_retry_after_rejected("Sun, 06 Nov 1994 08:49:37 UTC", now);
  check_retry_after_rejected("Sun, 06 Nov 1994 24:00:00 GMT", now);
  check_retry_after_rejected("Thu, 30 Feb 1994 08:49:37 GMT", now);
  check_retry_after_rejected("Wed, 29 Feb 2023 00:00:00 GMT", now);
  check_retry_after_rejected("Sun, 6 Nov 1994 08:49:37 GMT", now);
  check_retry_after_rejected("Sun, 06 Nov 1994 08:49:37 GMT x", now);
  check_retry_after_rejected("Sun Nov 6 08:49:37 1994", now);
  check_retry_after_rejected("Sunday, 06-Nov-1994 08:49:37 GMT", now);
  check_retry_after_rejected("Sun, 06 Nov 1994 08:49:37 GMT 120", now);
  check_retry_after_rejected("120 Sun, 06 Nov 1994 08:49:37 GMT", now);
}

TEST_CASE("retry-after: leap days follow the Gregorian rule") {
  const auto now = unix_time(1709164800) - 90s; // 2024-02-28 23:58:30
  check_delay("Thu, 29 Feb 2024 00:00:00 GMT", now, 90s);
  check_retry_after_rejected("Wed, 29 Feb 2023 00:00:00 GMT", now);
}

TEST_CASE("retry-after: RFC 850 two-digit years resolve relative to now") {
  SUBCASE("now in 2026: 1977 through 2076") {
    const auto now = unix_time(1773576000); // 2026-03-15 12:00:00
    // 2094 is more than 50 years ahead, so 94 is 1994: in the past.
    check_delay("Sunday, 06-Nov-94 08:49:37 GMT", now, 0s);
    check_delay("Wednesday, 06-Nov-30 08:49:37 GMT", now, seconds{1920185377 - 1773576000});
    check_delay("Friday, 06-Nov-76 08:49:37 GMT", now, seconds{3371878177 - 1773576000}); // 2076: exactly 50
    check_delay("Saturday, 06-Nov-77 08:49:37 GMT", now, 0s);                           // 1977
    check_delay("Wednesday, 06-Nov-80 08:49:37 GMT", now, 0s);                          // 1980
    check_delay("Sunday, 15-Mar-26 12:00:01 GMT", now, 1s);                             // this year
  }
  SUBCASE("now in 1995: 1946 through 2045") {
    const auto now = unix_time(801964800); // 1995-06-01
    check_delay("Monday, 06-Nov-45 08:49:37 GMT", now, seconds{2393570977 - 801964800}); // 2045
    check_delay("Tuesday, 06-Nov-46 08:49:37 GMT", now, 0s);                             // 1946
    check_delay("Sunday, 06-Nov-94 08:49:37 GMT", now, 0s);                              // 1994
  }
  SUBCASE("now in 2090: 2041 through 2140, so 05 is 2105, not 2005") {
    const auto now = unix_time(3786912000); // 2090-01-01
    check_delay("Friday, 06-Nov-05 08:49:37 GMT", now, seconds{4286940577 - 3786912000});
    // Without a reference time the fixed window applies instead.
    check_date("Friday, 06-Nov-05 08:49:37 GMT", 1131266977);
  }
  SUBCASE("a resolved year before 1900 counts like any other") {
    const auto now = unix_time(-2208988800) - 24h * 365 * 10; // 1890-01-03: 1841 through 1940
    check_delay("Thursday, 01-Jan-80 00:00:00 GMT", now, 0s);                      // 1880: past
    check_delay("Thursday, 01-Jan-91 00:00:00 GMT", now, seconds{-2492985600} - (now - unix_time(0))); // 1891
    check_delay("Thursday, 01-Jan-20 00:00:00 GMT", now, seconds{-1577923200} - (now - unix_time(0))); // 1920
  }
  SUBCASE("IMF-fixdate and asctime years are taken as written") {
    const auto now = unix_time(1773576000);
    check_delay("Sun, 06 Nov 2094 08:49:37 GMT", now, seconds{3939871777 - 1773576000});
    check_delay("Sun Nov  6 08:49:37 2094", now, seconds{3939871777 - 1773576000});
  }
}

TEST_CASE("retry-after: dates before the clock's range mean no wait, whatever now is") {
  check_delay("Sun, 31 Dec 1899 23:59:59 GMT", unix_time(1773576000), 0ns);
  check_delay("Sun, 31 Dec 1899 23:59:59 GMT", unix_time(-2208988805), 4s);
  for (const std::string_view text : {"Sat, 01 Jan 0000 00:00:00 GMT", "Mon Jan  1 00:00:00 1000",
                                      "Fri, 31 Dec 1600 23:59:59 GMT"}) {
    CAPTURE(text);
    check_delay(text, unix_time(1773576000), 0ns);
    check_delay(text, unix_time(0), 0ns);
    check_delay(text, system_clock::time_point::min(), 0ns);
    check_delay(text, system_clock::time_point::max(), 0ns);
  }
}

TEST_CASE("retry-after: far-future dates saturate instead of overflowing") {
  check_delay("Fri, 31 Dec 9999 23:59:59 GMT", unix_time(1773576000), nanoseconds::max());
  check_delay("Fri Dec 31 23:59:59 9999", unix_time(1773576000), nanoseconds::max());
  // 2262-04-11 23:47:16 is 9223372036 s after the epoch; nanoseconds::max() is
  // 9223372036.854775807 s.
  const std::string_view edge = "Fri, 11 Apr 2262 23:47:16 GMT";
  check_delay(edge, unix_time(0), 9223372036s);
  check_delay(edge, unix_time(0) - 854775807ns, nanoseconds::max());
  check_delay(edge, unix_time(0) - 854775806ns, nanoseconds::max() - 1ns);
  check_delay(edge, unix_time(-1), nanoseconds::max());
}

TEST_CASE("retry-after: extreme values of now do not overflow") {
  constexpr auto earliest = system_clock::time_point::min();
  constexpr auto latest = system_clock::time_point::max();
  check_delay("Sun, 06 Nov 1994 08:49:37 GMT", earliest, nanoseconds::max());
  check_delay("Sun, 06 Nov 1994 08:49:37 GMT", latest, 0ns);
  check_delay("Fri, 31 Dec 9999 23:59:59 GMT", latest, nanoseconds::max());
  check_delay("Mon, 01 Jan 1900 00:00:00 GMT", latest, 0ns);
  // 1900 is only ~222 years after 1677, which still fits.
  check_delay("Mon, 01 Jan 1900 00:00:00 GMT", earliest,
              seconds{-2208988800} - earliest.time_since_epoch());
  if constexpr (std::is_same_v<system_clock::duration, nanoseconds>) {
    // Two-digit years follow `now` even at the ends of the clock's range:
    // in 2262, 94 is 2294; in 1677, 94 is 1694, a date like any other.
    check_delay("Sunday, 06-Nov-94 08:49:37 GMT", latest, seconds{10251218977 - 9223372037} + 145224193ns);
    check_delay("Sunday, 06-Nov-94 08:49:37 GMT", earliest, seconds{-8682909023} - earliest.time_since_epoch());
  }
}
