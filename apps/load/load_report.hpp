#ifndef CORETRY_LOAD_REPORT_HPP
#define CORETRY_LOAD_REPORT_HPP

// coretry-load's output: a table for people, or JSON lines for scripts (one
// object per window, then one with "summary": true for the whole run).

#include "load/load_generator.hpp"

#include <string>

namespace coretry::load {

/// The table's heading lines.
std::string table_heading();
/// One row of the table.
std::string table_row(const window_report& window);
/// The table's closing lines: the whole run.
std::string table_summary(const run_summary& summary);

/// One JSON object, without a line break.
std::string json_line(const window_report& window);
/// The run as one JSON object with "summary": true.
std::string json_summary(const run_summary& summary);

} // namespace coretry::load

#endif
