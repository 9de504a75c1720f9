#include "faults/fault_script.hpp"

#include "faults/imf_fixdate.hpp"

#include <common/quoting.hpp>
#include <coretry/http/syntax.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>

namespace coretry::faults {
namespace {

// Bounds that keep every computed time and size far from overflow while
// leaving room for any realistic test.
constexpr std::uint64_t max_delay_ms = 3'600'000;
constexpr std::uint64_t max_drip_bytes = 1'048'576;
constexpr std::uint64_t max_drip_interval_ms = 60'000;
constexpr std::uint64_t max_date_offset_seconds = 100ull * 366 * 24 * 3600;

using coretry::common::quoted;

constexpr bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }

// Only what would break the message's framing is refused, so tests can still
// send values that are invalid in every other way.
void check_field_value(std::string_view value, std::string_view option) {
  if (value.find_first_of(std::string_view{"\r\n\0", 3}) != std::string_view::npos)
    throw script_error(std::string{option} + ": a header value may not contain CR, LF or NUL");
}

std::string_view trim_optional_whitespace(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// A whole unsigned decimal number no larger than `max`.
std::uint64_t parse_number(std::string_view text, std::uint64_t max, std::string_view what) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  const bool all_digits = !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos;
  if (!all_digits || error != std::errc{} || end != text.data() + text.size() || value > max)
    throw script_error(std::string{what} + " must be a whole number from 0 to " + std::to_string(max) + ", got " +
                       quoted(text));
  return value;
}

unsigned parse_status_code(std::string_view text) {
  const bool all_digits = !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos;
  if (!all_digits) throw script_error("status code " + quoted(text) + " is not a number");
  if (text.size() != 3 || text < "100" || text > "599")
    throw script_error("status code " + quoted(text) + " is outside 100-599");
  return static_cast<unsigned>((text[0] - '0') * 100 + (text[1] - '0') * 10 + (text[2] - '0'));
}

struct raw_option {
  std::string_view name;
  std::optional<std::string_view> value; // absent for a bare keyword
};

raw_option split_option(std::string_view text) {
  const auto equals = text.find('=');
  if (equals == std::string_view::npos) return {text, std::nullopt};
  return {text.substr(0, equals), text.substr(equals + 1)};
}

const char* fate_name(response_fate fate) {
  switch (fate) {
  case response_fate::complete: return "complete";
  case response_fate::drip: return "drip";
  case response_fate::hang_after_headers: return "hang-after-headers";
  case response_fate::close: return "close";
  case response_fate::reset: return "reset";
  }
  return "?";
}

void set_fate(response_plan& plan, response_fate fate) {
  if (plan.fate != response_fate::complete && plan.fate != fate)
    throw script_error(quoted(fate_name(plan.fate)) + " and " + quoted(fate_name(fate)) + " cannot be combined");
  plan.fate = fate;
}

const std::string& require_value(const std::string& name, const std::optional<std::string>& value) {
  if (!value) throw script_error("option " + quoted(name) + " needs a value (" + name + "=...)");
  return *value;
}

void require_no_value(const std::string& name, const std::optional<std::string>& value) {
  if (value) throw script_error("option " + quoted(name) + " takes no value");
}

// `name` and `value` are already decoded.
void apply_option(response_plan& plan, const std::string& name, const std::optional<std::string>& value,
                  std::chrono::system_clock::time_point now) {
  if (name == "retry-after") {
    const std::string text = require_value(name, value);
    check_field_value(text, name);
    plan.headers.push_back({"Retry-After", text});
  } else if (name == "retry-after-date") {
    std::string_view text = require_value(name, value);
    const bool past = text.starts_with('-');
    if (past || text.starts_with('+')) text.remove_prefix(1);
    const auto offset = static_cast<std::int64_t>(parse_number(text, max_date_offset_seconds, "retry-after-date"));
    plan.headers.push_back({"Retry-After", format_imf_fixdate(now + std::chrono::seconds{past ? -offset : offset})});
  } else if (name == "header") {
    const std::string text = require_value(name, value);
    const auto colon = text.find(':');
    if (colon == std::string::npos) throw script_error("header must be NAME:VALUE, got " + quoted(text));
    const std::string_view field_name = std::string_view{text}.substr(0, colon);
    if (!coretry::http::is_token(field_name))
      throw script_error("header name " + quoted(field_name) + " is not a valid field name");
    const std::string_view field_value = trim_optional_whitespace(std::string_view{text}.substr(colon + 1));
    check_field_value(field_value, name);
    plan.headers.push_back({std::string{field_name}, std::string{field_value}});
  } else if (name == "body") {
    plan.body = require_value(name, value);
  } else if (name == "delay") {
    plan.delay = std::chrono::milliseconds{parse_number(require_value(name, value), max_delay_ms, "delay")};
  } else if (name == "percent") {
    plan.percent = static_cast<unsigned>(parse_number(require_value(name, value), 100, "percent"));
  } else if (name == "drip") {
    const std::string text = require_value(name, value);
    const auto colon = text.find(':');
    if (colon == std::string::npos) throw script_error("drip must be N:MS (bytes:milliseconds), got " + quoted(text));
    set_fate(plan, response_fate::drip);
    plan.drip_bytes = parse_number(std::string_view{text}.substr(0, colon), max_drip_bytes, "drip's byte count");
    plan.drip_interval = std::chrono::milliseconds{
        parse_number(std::string_view{text}.substr(colon + 1), max_drip_interval_ms, "drip's interval")};
  } else if (name == "hang-after-headers") {
    require_no_value(name, value);
    set_fate(plan, response_fate::hang_after_headers);
  } else if (name == "close") {
    require_no_value(name, value);
    set_fate(plan, response_fate::close);
  } else if (name == "reset") {
    require_no_value(name, value);
    set_fate(plan, response_fate::reset);
  } else {
    throw script_error("unknown option " + quoted(name));
  }
}

// Checks that hold for the options as a whole, once all are known.
void check_plan(const response_plan& plan) {
  if (plan.fate == response_fate::drip && plan.body)
    throw script_error("'drip' and 'body' cannot be combined: drip sends its own N bytes");
  if (!status_has_body(plan.status)) {
    const std::string status = std::to_string(plan.status);
    if (plan.body) throw script_error("status " + status + " has no body, so 'body' cannot apply");
    if (plan.fate == response_fate::drip || plan.fate == response_fate::hang_after_headers)
      throw script_error("status " + status + " has no body, so " + quoted(fate_name(plan.fate)) + " cannot apply");
  }
}

template <class Function> void for_each_piece(std::string_view text, char separator, Function function) {
  while (true) {
    const auto end = text.find(separator);
    function(text.substr(0, end));
    if (end == std::string_view::npos) return;
    text.remove_prefix(end + 1);
  }
}

std::optional<std::string> decode_value(const std::optional<std::string_view>& value) {
  if (!value) return std::nullopt;
  return percent_decode(*value);
}

response_plan parse_step(std::string_view step, std::chrono::system_clock::time_point now) {
  if (step.empty()) throw script_error("the step is empty");
  response_plan plan;
  bool first = true;
  for_each_piece(step, ';', [&](std::string_view piece) {
    if (piece.empty()) throw script_error("empty option in " + quoted(step));
    if (first && is_ascii_digit(piece.front())) {
      plan.status = parse_status_code(piece);
    } else {
      const raw_option option = split_option(piece);
      apply_option(plan, percent_decode(option.name), decode_value(option.value), now);
    }
    first = false;
  });
  if (plan.percent != 100) throw script_error("'percent' applies to /status scripts only, not to sequence steps");
  check_plan(plan);
  return plan;
}

} // namespace

bool status_has_body(unsigned status) { return status >= 200 && status != 204 && status != 304; }

std::string percent_decode(std::string_view text) {
  auto decoded = coretry::http::percent_decoded(text);
  if (!decoded) throw script_error("malformed percent-encoding in " + quoted(text));
  return std::move(*decoded);
}

response_plan parse_status_script(std::string_view code, std::string_view query,
                                  std::chrono::system_clock::time_point now) {
  response_plan plan;
  plan.status = parse_status_code(code);
  for_each_piece(query, '&', [&](std::string_view piece) {
    if (piece.empty()) return; // "a&&b" and a trailing '&' are harmless
    const raw_option option = split_option(piece);
    apply_option(plan, percent_decode(option.name), decode_value(option.value), now);
  });
  check_plan(plan);
  return plan;
}

std::vector<response_plan> parse_sequence_script(std::string_view query, std::chrono::system_clock::time_point now) {
  std::optional<std::string_view> steps;
  for_each_piece(query, '&', [&](std::string_view piece) {
    if (piece.empty()) return;
    const raw_option option = split_option(piece);
    const std::string name = percent_decode(option.name);
    if (name != "steps")
      throw script_error("unknown parameter " + quoted(name) + " for /seq (options belong inside steps)");
    if (steps) throw script_error("'steps' is given more than once");
    if (!option.value) throw script_error("'steps' needs a value (steps=...)");
    steps = *option.value;
  });
  if (!steps) throw script_error("missing 'steps' parameter (steps=STEP,STEP,...)");

  std::vector<response_plan> plans;
  for_each_piece(*steps, ',', [&](std::string_view step) {
    try {
      plans.push_back(parse_step(step, now));
    } catch (const script_error& error) {
      throw script_error("step " + std::to_string(plans.size() + 1) + ": " + error.what());
    }
  });
  return plans;
}

} // namespace coretry::faults
