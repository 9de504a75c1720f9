#include "faults/imf_fixdate.hpp"

#include <array>
#include <cstdio>
#include <string_view>

namespace coretry::faults {

std::string format_imf_fixdate(std::chrono::system_clock::time_point instant) {
  using namespace std::chrono;
  // Indexed by weekday::c_encoding(), where 0 is Sunday.
  constexpr std::array<std::string_view, 7> day_names{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  constexpr std::array<std::string_view, 12> month_names{"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const sys_seconds whole_seconds = floor<seconds>(instant);

  const sys_days day = floor<days>(whole_seconds);
  const year_month_day date{day};
  const hh_mm_ss time{whole_seconds - day};
  const std::string_view day_name = day_names[weekday{day}.c_encoding()];
  const std::string_view month_name = month_names[static_cast<unsigned>(date.month()) - 1];

  char text[64]; // room for any int the compiler cannot rule out
  std::snprintf(text, sizeof text, "%.3s, %02u %.3s %04d %02d:%02d:%02d GMT", day_name.data(),
                static_cast<unsigned>(date.day()), month_name.data(), static_cast<int>(date.year()),
                static_cast<int>(time.hours().count()), static_cast<int>(time.minutes().count()),
                static_cast<int>(time.seconds().count()));
  return text;
}

} // namespace coretry::faults
