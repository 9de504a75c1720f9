#ifndef CORETRY_CLI_COMMAND_LINE_HPP
#define CORETRY_CLI_COMMAND_LINE_HPP

#include <coretry/http/redact.hpp>
#include <coretry/http/syntax.hpp>
#include <coretry/policy.hpp>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

// Checks of single command-line values, shared by the subcommands. Every
// refusal is a usage_error whose what() is one line naming the option and the
// problem, and never repeats a value that may be a secret.
namespace coretry::cli {

/// Bad input on the command line (exit status 2).
class usage_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The longest duration any option accepts: longer is a typo, not a plan.
inline constexpr std::chrono::hours longest_duration{24};

/// Seconds as written on the command line ("2", "0.25", ".5") as a duration.
/// Refuses signs, exponents, NaN and infinities, and more than a day; zero
/// only when `zero_allowed`.
duration parse_seconds(std::string_view option, std::string_view text, bool zero_allowed);

/// A whole decimal number in [min, max].
unsigned parse_count(std::string_view option, std::string_view text, unsigned min, unsigned max);

/// A size in bytes as written on the command line: digits, optionally with a
/// k, M or G suffix (KiB, MiB, GiB), from 1 to `max` bytes.
std::uint64_t parse_size(std::string_view option, std::string_view text, std::uint64_t max);

/// What a field name or a method may consist of: the library's token check.
using coretry::http::is_token;

struct header_field {
  std::string name;
  std::string value;
};

/// "Name: value" as given to -H; `position` (1-based) names it in errors,
/// since the text itself may carry a credential.
header_field parse_header(std::string_view text, std::size_t position);

using coretry::http::is_sensitive_header;
using coretry::http::redact_url;

/// Percent-encodes everything but RFC 3986's unreserved characters, so that a
/// value can sit anywhere in a query, fault-server scripts included.
std::string percent_encode(std::string_view text);

/// Milliseconds of a duration, for printing with a chosen precision.
double to_ms(duration d);
/// Rounded to whole milliseconds: JSON numbers without exponents.
std::int64_t whole_ms(duration d);

/// "250 ms", "1.04 s": for people.
std::string describe_duration(duration d);

} // namespace coretry::cli

#endif
