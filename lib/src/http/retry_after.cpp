#include <coretry/http/retry_after.hpp>

#include <array>
#include <cstddef>
#include <cstdint>

namespace coretry::http {
namespace {

using std::chrono::nanoseconds;
using std::chrono::seconds;
using std::chrono::system_clock;

// Largest whole number of seconds whose nanosecond count still fits.
constexpr std::int64_t max_whole_seconds_in_nanoseconds = nanoseconds::max().count() / 1'000'000'000;

// Every year four digits can write (RFC 9110 §5.6.7: `year = 4DIGIT`).
constexpr int earliest_year = 0;
constexpr int latest_year = 9999;

constexpr std::array<std::string_view, 7> short_day_names{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
constexpr std::array<std::string_view, 7> full_day_names{"Monday", "Tuesday",  "Wednesday", "Thursday",
                                                         "Friday", "Saturday", "Sunday"};
constexpr std::array<std::string_view, 12> month_names{"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

// Only ASCII; std::isdigit and friends depend on the locale.
constexpr bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }
constexpr bool is_optional_whitespace(char c) { return c == ' ' || c == '\t'; }

std::string_view trim_optional_whitespace(std::string_view text) {
  while (!text.empty() && is_optional_whitespace(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_optional_whitespace(text.back())) text.remove_suffix(1);
  return text;
}

// The fields of an HTTP-date as written, before range checks.
struct date_fields {
  int year = 0;
  int month = 0; // 1-12
  int day = 0;
  int hour = 0;
  int minute = 0;
  int second = 0;
};

// Consumes an HTTP-date left to right. Each method consumes its part and
// returns true, or returns false on a mismatch, so a format reads as a chain
// of && and a failed chain simply discards the scanner.
class date_scanner {
public:
  explicit date_scanner(std::string_view text) : rest_(text) {}

  bool literal(std::string_view expected) {
    if (!rest_.starts_with(expected)) return false;
    rest_.remove_prefix(expected.size());
    return true;
  }

  // Exactly `width` ASCII digits.
  bool digits(std::size_t width, int& value) {
    if (rest_.size() < width) return false;
    int result = 0;
    for (std::size_t i = 0; i < width; ++i) {
      if (!is_ascii_digit(rest_[i])) return false;
      result = result * 10 + (rest_[i] - '0');
    }
    rest_.remove_prefix(width);
    value = result;
    return true;
  }

  // One of `names`, matched case-sensitively; the weekday's value is not used.
  template <std::size_t N> bool any_of(const std::array<std::string_view, N>& names) {
    for (std::string_view name : names)
      if (literal(name)) return true;
    return false;
  }

  bool month(int& value) {
    for (std::size_t i = 0; i < month_names.size(); ++i) {
      if (literal(month_names[i])) {
        value = static_cast<int>(i) + 1;
        return true;
      }
    }
    return false;
  }

  // asctime's day: `( 2DIGIT / ( SP 1DIGIT ) )`.
  bool space_padded_day(int& value) { return literal(" ") ? digits(1, value) : digits(2, value); }

  // `hour ":" minute ":" second`, two digits each.
  bool time_of_day(date_fields& fields) {
    return digits(2, fields.hour) && literal(":") && digits(2, fields.minute) && literal(":") &&
           digits(2, fields.second);
  }

  bool at_end() const { return rest_.empty(); }

private:
  std::string_view rest_;
};

std::optional<date_fields> scan_imf_fixdate(std::string_view text) {
  // Sun, 06 Nov 1994 08:49:37 GMT
  date_scanner in{text};
  date_fields fields;
  const bool matched = in.any_of(short_day_names) && in.literal(", ") && in.digits(2, fields.day) &&
                       in.literal(" ") && in.month(fields.month) && in.literal(" ") &&
                       in.digits(4, fields.year) && in.literal(" ") && in.time_of_day(fields) &&
                       in.literal(" GMT") && in.at_end();
  if (!matched) return std::nullopt;
  return fields;
}

// `year` holds the two digits as written; the caller resolves the century.
std::optional<date_fields> scan_rfc850_date(std::string_view text) {
  // Sunday, 06-Nov-94 08:49:37 GMT
  date_scanner in{text};
  date_fields fields;
  const bool matched = in.any_of(full_day_names) && in.literal(", ") && in.digits(2, fields.day) &&
                       in.literal("-") && in.month(fields.month) && in.literal("-") &&
                       in.digits(2, fields.year) && in.literal(" ") && in.time_of_day(fields) &&
                       in.literal(" GMT") && in.at_end();
  if (!matched) return std::nullopt;
  return fields;
}

std::optional<date_fields> scan_asctime_date(std::string_view text) {
  // Sun Nov  6 08:49:37 1994
  date_scanner in{text};
  date_fields fields;
  const bool matched = in.any_of(short_day_names) && in.literal(" ") && in.month(fields.month) &&
                       in.literal(" ") && in.space_padded_day(fields.day) && in.literal(" ") &&
                       in.time_of_day(fields) && in.literal(" ") && in.digits(4, fields.year) &&
                       in.at_end();
  if (!matched) return std::nullopt;
  return fields;
}

// The full year an RFC 850 two-digit year stands for: with a reference year Y,
// the one in [Y - 49, Y + 50] (never more than 50 years ahead, RFC 9110
// §5.6.7); without one, the fixed 1970-2069 window.
int resolve_two_digit_year(int two_digits, std::optional<int> reference_year) {
  if (!reference_year) return two_digits < 70 ? 2000 + two_digits : 1900 + two_digits;
  const int reference = *reference_year;
  const int year_in_reference_century = reference - (reference % 100 + 100) % 100 + two_digits;
  if (year_in_reference_century > reference + 50) return year_in_reference_century - 100;
  if (year_in_reference_century < reference - 49) return year_in_reference_century + 100;
  return year_in_reference_century;
}

// Days from 1970-01-01 to the given date of the proleptic Gregorian calendar
// (negative before it), or empty if that day does not exist (30 Feb, 29 Feb
// of a common year). Any year 0000-9999 an HTTP-date can spell is in range.
constexpr std::optional<std::int64_t> days_since_unix_epoch(int year, int month, int day) {
  const std::chrono::year_month_day date{std::chrono::year{year}, std::chrono::month{static_cast<unsigned>(month)},
                                         std::chrono::day{static_cast<unsigned>(day)}};
  if (!date.ok()) return std::nullopt;
  return std::chrono::sys_days{date}.time_since_epoch().count();
}
static_assert(days_since_unix_epoch(1970, 1, 1) == 0);
static_assert(days_since_unix_epoch(2000, 3, 1) == 11017);
static_assert(days_since_unix_epoch(1900, 1, 1) == -25567);
static_assert(days_since_unix_epoch(1, 1, 1) == -719162);
static_assert(days_since_unix_epoch(0, 2, 29) == -719469); // year 0 is a leap year
static_assert(!days_since_unix_epoch(1900, 2, 29));

// Seconds since the Unix epoch, or empty if a field is out of range.
std::optional<std::int64_t> unix_seconds_from_fields(const date_fields& fields) {
  const bool valid = fields.year >= earliest_year && fields.year <= latest_year && fields.month >= 1 &&
                     fields.month <= 12 && fields.day >= 1 && fields.day <= 31 && fields.hour <= 23 &&
                     fields.minute <= 59 && fields.second <= 60; // 60: leap second, rolls over below
  if (!valid) return std::nullopt;
  const auto days = days_since_unix_epoch(fields.year, fields.month, fields.day);
  if (!days) return std::nullopt;
  return *days * 86'400 + fields.hour * 3'600 + fields.minute * 60 + fields.second;
}

// Shared by both public functions; `text` is already trimmed.
std::optional<std::int64_t> parse_http_date_as_unix_seconds(std::string_view text,
                                                            std::optional<int> reference_year) {
  if (auto fields = scan_imf_fixdate(text)) return unix_seconds_from_fields(*fields);
  if (auto fields = scan_rfc850_date(text)) {
    fields->year = resolve_two_digit_year(fields->year, reference_year);
    return unix_seconds_from_fields(*fields);
  }
  if (auto fields = scan_asctime_date(text)) return unix_seconds_from_fields(*fields);
  return std::nullopt;
}

system_clock::time_point saturating_time_point(std::int64_t unix_seconds) {
  using clock_seconds = std::chrono::time_point<system_clock, seconds>;
  const auto latest = std::chrono::floor<seconds>(system_clock::time_point::max());
  const auto earliest = std::chrono::ceil<seconds>(system_clock::time_point::min());
  const clock_seconds instant{seconds{unix_seconds}};
  if (instant > latest) return system_clock::time_point::max();
  if (instant < earliest) return system_clock::time_point::min();
  return std::chrono::time_point_cast<system_clock::duration>(instant);
}

// Digits only (the caller checked the first); saturates instead of overflowing.
std::optional<nanoseconds> parse_delay_seconds(std::string_view text) {
  std::int64_t whole_seconds = 0;
  bool too_large = false;
  for (char c : text) {
    if (!is_ascii_digit(c)) return std::nullopt;
    // Stop accumulating once too large, but keep checking the remaining characters.
    if (!too_large) {
      whole_seconds = whole_seconds * 10 + (c - '0');
      too_large = whole_seconds > max_whole_seconds_in_nanoseconds;
    }
  }
  if (too_large) return nanoseconds::max();
  return seconds{whole_seconds};
}

// max(target - now, 0), saturating at nanoseconds::max(); exact otherwise.
nanoseconds saturating_delay_until(std::int64_t target_unix_seconds, system_clock::time_point now) {
  // Split `now` into whole seconds and a fraction in [0 s, 1 s). duration_cast
  // truncates toward zero, so neither step below can overflow, even for min().
  const auto since_epoch = now.time_since_epoch();
  auto now_whole_seconds = std::chrono::duration_cast<seconds>(since_epoch);
  auto now_fraction = since_epoch - now_whole_seconds;
  if (now_fraction < system_clock::duration::zero()) {
    now_whole_seconds -= seconds{1};
    now_fraction += seconds{1};
  }
  const std::int64_t whole_seconds_ahead = target_unix_seconds - now_whole_seconds.count();
  if (whole_seconds_ahead <= 0) return nanoseconds::zero(); // not in the future: no extra wait

  // delay = (whole_seconds_ahead - 1) s + (1 s - fraction); the second part is
  // in (0 s, 1 s], so each part fits and only their sum needs a check.
  const std::int64_t full_seconds = whole_seconds_ahead - 1;
  if (full_seconds > max_whole_seconds_in_nanoseconds) return nanoseconds::max();
  const nanoseconds rest_of_current_second = seconds{1} - std::chrono::floor<nanoseconds>(now_fraction);
  const nanoseconds full = seconds{full_seconds};
  if (full > nanoseconds::max() - rest_of_current_second) return nanoseconds::max();
  return full + rest_of_current_second;
}

int year_of(system_clock::time_point instant) {
  const std::chrono::year_month_day date{std::chrono::floor<std::chrono::days>(instant)};
  return static_cast<int>(date.year());
}

} // namespace

std::optional<system_clock::time_point> parse_http_date(std::string_view value) {
  const auto unix_seconds = parse_http_date_as_unix_seconds(trim_optional_whitespace(value), std::nullopt);
  if (!unix_seconds) return std::nullopt;
  return saturating_time_point(*unix_seconds);
}

std::optional<nanoseconds> parse_retry_after(std::string_view value, system_clock::time_point now) {
  const std::string_view text = trim_optional_whitespace(value);
  if (text.empty()) return std::nullopt;
  // delay-seconds starts with a digit, every HTTP-date with a day name.
  if (is_ascii_digit(text.front())) return parse_delay_seconds(text);
  const auto unix_seconds = parse_http_date_as_unix_seconds(text, year_of(now));
  if (!unix_seconds) return std::nullopt;
  return saturating_delay_until(*unix_seconds, now);
}

} // namespace coretry::http
