#include "load/load_options.hpp"

#include <common/port.hpp>
#include <common/quoting.hpp>

#include <boost/url/parse.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace coretry::load {
namespace {

using coretry::common::quoted;

// 100000, 0.5: for messages.
std::string quoted_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

bool plain_decimal(std::string_view text) {
  bool digit = false;
  bool point = false;
  for (const char c : text) {
    if (c >= '0' && c <= '9') digit = true;
    else if (c == '.' && !point) point = true;
    else return false;
  }
  return digit;
}

// A plain decimal ("2", "0.5", "1280") in [least, most]; `unit` names what it counts.
double parse_decimal(std::string_view option, std::string_view text, double least, double most, bool least_included,
                     std::string_view unit) {
  const std::string name{option};
  const std::string range = (least_included ? "from " : "more than ") + quoted_number(least) +
                            (least_included ? " to " : " and at most ") + quoted_number(most) + " " +
                            std::string{unit};
  if (text.empty()) throw usage_error(name + ": expected " + std::string{unit} + ", got nothing");
  if (!plain_decimal(text))
    throw usage_error(name + ": " + quoted(text) + " is not a plain decimal number (" + range + ")");
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || !std::isfinite(value))
    throw usage_error(name + ": " + quoted(text) + " is not a number (" + range + ")");
  if (value < least || value > most || (!least_included && value == least))
    throw usage_error(name + ": " + std::string{text} + " is outside the range: " + range);
  return value;
}

std::uint64_t parse_whole(std::string_view option, std::string_view text, std::uint64_t least, std::uint64_t most) {
  const std::string name{option};
  const std::string range = "a whole number from " + std::to_string(least) + " to " + std::to_string(most);
  if (text.empty()) throw usage_error(name + ": expected " + range + ", got nothing");
  if (!std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw usage_error(name + ": " + quoted(text) + " is not " + range);
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || value < least || value > most)
    throw usage_error(name + ": " + std::string{text} + " is outside " + std::to_string(least) + " to " +
                      std::to_string(most));
  return value;
}

std::chrono::nanoseconds seconds_to_duration(double seconds) {
  return std::chrono::nanoseconds{static_cast<std::int64_t>(std::llround(seconds * 1e9))};
}

void read_url(plan& out, std::string_view text) {
  if (text.size() > longest_url)
    throw usage_error("URL: longer than " + std::to_string(longest_url) + " characters");
  const auto parsed = boost::urls::parse_uri(text);
  if (!parsed) throw usage_error("URL: " + quoted(text) + " is not a URL (write it like http://127.0.0.1:8080/path)");
  const boost::urls::url_view url = *parsed;
  if (url.scheme() == "https") throw usage_error("URL: https is not supported; give an http:// URL");
  if (url.scheme() != "http") throw usage_error("URL: the scheme must be http, got " + quoted(url.scheme()));
  if (!url.has_authority() || url.encoded_host().empty()) throw usage_error("URL: no host in " + quoted(text));
  if (url.has_userinfo()) throw usage_error("URL: user information (user:password@) is not supported");
  // A name, or an IPv4 or IPv6 address (without its brackets).
  out.host = url.host_address();
  if (url.has_port()) {
    const auto port = coretry::common::parse_port(url.port());
    if (!port) throw usage_error("URL: the port must be from 1 to 65535, got " + quoted(url.port()));
    out.port = *port;
  }
  out.target = url.encoded_target().empty() ? std::string{"/"} : std::string{url.encoded_target()};
  if (out.target.front() != '/') out.target.insert(out.target.begin(), '/');
  out.host_field = std::string{url.encoded_host_and_port()};
}

} // namespace

phase parse_phase(std::string_view option, std::string_view text) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos)
    throw usage_error(std::string{option} + ": " + quoted(text) + " is not RATE:SECONDS (like 1280:15)");
  phase out;
  out.rate = parse_decimal(option, text.substr(0, colon), 0, most_rate, true, "requests per second");
  out.length = seconds_to_duration(parse_decimal(option, text.substr(colon + 1), 0,
                                                 static_cast<double>(longest_phase.count()), false, "seconds"));
  return out;
}

plan make_plan(const arguments& args, std::uint64_t seed) {
  plan out;
  if (args.url.empty()) throw usage_error("URL: missing; give the http:// URL to load");
  read_url(out, args.url);

  if (!args.phases.empty() && (args.rate || args.duration))
    throw usage_error("--phase: not with --rate or --duration (a phase is RATE:SECONDS)");
  if (args.rate.has_value() != args.duration.has_value())
    throw usage_error(args.rate ? "--rate: needs --duration SECONDS" : "--duration: needs --rate");
  if (args.rate) {
    phase single;
    single.rate = parse_decimal("--rate", *args.rate, 0, most_rate, true, "requests per second");
    single.length = seconds_to_duration(
        parse_decimal("--duration", *args.duration, 0, static_cast<double>(longest_phase.count()), false, "seconds"));
    out.phases.push_back(single);
  }
  if (args.phases.size() > most_phases)
    throw usage_error("--phase: at most " + std::to_string(most_phases) + " phases, got " +
                      std::to_string(args.phases.size()));
  for (const std::string& text : args.phases) out.phases.push_back(parse_phase("--phase", text));
  if (out.phases.empty())
    throw usage_error("--phase: no load given; give --phase RATE:SECONDS or --rate and --duration");
  std::chrono::nanoseconds total{};
  for (const phase& each : out.phases) total += each.length;
  if (total > longest_run)
    throw usage_error("--phase: the phases last longer than " + std::to_string(longest_run.count()) + " s together");

  out.seed = args.seed ? parse_whole("--seed", *args.seed, 0, UINT64_MAX) : seed;
  if (args.connections) out.connections = parse_whole("--connections", *args.connections, 1, most_connections);
  if (args.timeout)
    out.timeout = std::chrono::milliseconds{
        parse_whole("--timeout", *args.timeout, 1, static_cast<std::uint64_t>(longest_timeout.count()))};
  if (args.window)
    out.window = std::chrono::milliseconds{parse_whole("--window", *args.window,
                                                       static_cast<std::uint64_t>(shortest_window.count()),
                                                       static_cast<std::uint64_t>(longest_window.count()))};
  out.deadline_header = args.deadline_header;
  out.json = args.json;
  return out;
}

} // namespace coretry::load
