#ifndef CORETRY_TESTS_UNIT_PROMETHEUS_TEXT_HPP
#define CORETRY_TESTS_UNIT_PROMETHEUS_TEXT_HPP

// Reading the Prometheus observer's text, and feeding it an operation.

#include <coretry/prometheus.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace coretry_tests::prometheus_text {

using namespace std::chrono_literals;
using coretry::attempt_record;
using coretry::prometheus_observer;
using coretry::stop_reason;
using coretry::verdict;

// Every sample line, keyed by "name{labels}"; fails on a line that is not a
// comment and not a valid sample.
inline std::map<std::string, double> parse_samples(const std::string& text) {
  static const std::regex sample_line{R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")(,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*\})? ([-+0-9.eE]+|\+Inf|NaN)$)"};
  std::map<std::string, double> samples;
  std::istringstream lines{text};
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) continue;
    std::smatch match;
    INFO("line: ", line);
    REQUIRE(std::regex_match(line, match, sample_line));
    const auto space = line.rfind(' ');
    CHECK(samples.emplace(line.substr(0, space), std::stod(line.substr(space + 1))).second);
  }
  return samples;
}

inline void run_operation(prometheus_observer& o, std::string_view route, const std::vector<verdict>& verdicts,
                   stop_reason reason, coretry::duration wait = 10ms) {
  unsigned n = 0;
  for (const verdict& v : verdicts) {
    ++n;
    if (n > 1) o.backoff_scheduled({route, n, 0ms, wait, coretry::wait_source::local});
    o.attempt_started({route, n, 0ms, 100ms});
    attempt_record record;
    record.number = n;
    record.classified = v;
    o.attempt_finished({route, record});
  }
  o.stopped({route, reason, n, 0ms, 0ms});
}

} // namespace coretry_tests::prometheus_text

#endif
