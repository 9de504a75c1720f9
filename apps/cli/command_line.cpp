#include "cli/command_line.hpp"

#include <common/quoting.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace coretry::cli {
namespace {

using coretry::common::quoted;

std::string lowercase(std::string_view text) {
  std::string lowered{text};
  std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lowered;
}

constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Only a plain decimal ("2", "0.25", ".5", "3."): anything else is more
// likely a mistake than a duration.
bool is_plain_decimal(std::string_view text) {
  bool digit_seen = false;
  bool point_seen = false;
  for (const char c : text) {
    if (is_digit(c)) digit_seen = true;
    else if (c == '.' && !point_seen) point_seen = true;
    else return false;
  }
  return digit_seen;
}

} // namespace

duration parse_seconds(std::string_view option, std::string_view text, bool zero_allowed) {
  const std::string name{option};
  const std::string range = zero_allowed ? "from 0 to 86400" : "more than 0 and at most 86400";
  if (text.empty()) throw usage_error(name + ": expected a number of seconds, got nothing");
  if (text.front() == '-')
    throw usage_error(name + ": " + quoted(text) + " is negative; give seconds " + range);
  const std::string lowered = lowercase(text);
  if (lowered.find("nan") != std::string::npos || lowered.find("inf") != std::string::npos)
    throw usage_error(name + ": " + quoted(text) + " is not a number of seconds; give seconds " + range);
  if (!is_plain_decimal(text))
    throw usage_error(name + ": " + quoted(text) + " is not a number of seconds (write it like 2 or 0.25)");

  double seconds = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  const bool whole = error == std::errc{} && end == text.data() + text.size();
  const double longest = std::chrono::duration<double>(longest_duration).count();
  if (error == std::errc::result_out_of_range || (whole && seconds > longest))
    throw usage_error(name + ": " + std::string{text} + " s is too long; give at most 86400 (one day)");
  if (!whole) throw usage_error(name + ": " + quoted(text) + " is not a number of seconds");

  const duration value{static_cast<duration::rep>(std::llround(seconds * 1e9))};
  if (value <= duration::zero() && !zero_allowed)
    throw usage_error(name + ": must be more than 0 seconds, got " + quoted(text));
  return value;
}

unsigned parse_count(std::string_view option, std::string_view text, unsigned min, unsigned max) {
  const std::string name{option};
  const std::string range = std::to_string(min) + " to " + std::to_string(max);
  if (text.empty()) throw usage_error(name + ": expected a whole number from " + range + ", got nothing");
  if (!std::all_of(text.begin(), text.end(), is_digit))
    throw usage_error(name + ": " + quoted(text) + " is not a whole number from " + range);
  unsigned long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || value < min || value > max)
    throw usage_error(name + ": " + std::string{text} + " is outside " + range);
  return static_cast<unsigned>(value);
}

std::uint64_t parse_size(std::string_view option, std::string_view text, std::uint64_t max) {
  const std::string name{option};
  const std::string expected = "a number of bytes from 1 to " + std::to_string(max) + ", optionally with k, M or G";
  std::string_view digits = text;
  std::uint64_t unit = 1;
  if (!digits.empty()) {
    switch (digits.back()) {
    case 'k': case 'K': unit = std::uint64_t{1} << 10; break;
    case 'm': case 'M': unit = std::uint64_t{1} << 20; break;
    case 'g': case 'G': unit = std::uint64_t{1} << 30; break;
    }
    if (unit != 1) digits.remove_suffix(1);
  }
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), is_digit))
    throw usage_error(name + ": " + quoted(text) + " is not " + expected);
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc{} || value == 0 || value > max / unit)
    throw usage_error(name + ": " + std::string{text} + " is outside 1 to " + std::to_string(max) + " bytes");
  return value * unit;
}

header_field parse_header(std::string_view text, std::size_t position) {
  const std::string which = "-H (header " + std::to_string(position) + ")";
  const auto colon = text.find(':');
  if (colon == std::string_view::npos)
    throw usage_error(which + ": has no colon; write it as 'Name: value'");
  const std::string_view name = text.substr(0, colon);
  if (!is_token(name))
    throw usage_error(which + ": the name before the colon must be a field name such as X-Request-Id");
  if (text.find_first_of(std::string_view{"\r\n\0", 3}) != std::string_view::npos)
    throw usage_error(which + ": the value of '" + std::string{name} + "' contains CR, LF or NUL");
  std::string_view value = text.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  return {std::string{name}, std::string{value}};
}

std::string percent_encode(std::string_view text) {
  constexpr std::string_view hex = "0123456789ABCDEF";
  std::string encoded;
  encoded.reserve(text.size() * 3);
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) || c == '-' || c == '.' || c == '_' || c == '~') {
      encoded += c;
    } else {
      encoded += '%';
      encoded += hex[byte >> 4];
      encoded += hex[byte & 0x0f];
    }
  }
  return encoded;
}

double to_ms(duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::int64_t whole_ms(duration d) { return std::llround(to_ms(d)); }

std::string describe_duration(duration d) {
  const double ms = std::chrono::duration<double, std::milli>(d).count();
  std::array<char, 32> text{};
  if (ms < 1000.0) {
    std::snprintf(text.data(), text.size(), "%.0f ms", ms);
    return text.data();
  }
  std::snprintf(text.data(), text.size(), "%.2f", ms / 1000.0);
  std::string seconds = text.data();
  // "30 s" and "1.5 s" rather than "30.00 s" and "1.50 s".
  while (seconds.back() == '0') seconds.pop_back();
  if (seconds.back() == '.') seconds.pop_back();
  return seconds + " s";
}

} // namespace coretry::cli
