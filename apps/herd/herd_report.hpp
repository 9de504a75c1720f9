#ifndef CORETRY_HERD_REPORT_HPP
#define CORETRY_HERD_REPORT_HPP

// The herd's outputs: tables for a terminal, CSV files, and a gnuplot script
// (with its data) that draws arrivals at the dependency over time.

#include "herd/herd_sim.hpp"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace herd {

void print_contention_table(std::FILE* out, const contention_study& study, const std::vector<contention_row>& rows);
void print_outage_table(std::FILE* out, const outage_study& study, const std::vector<outage_row>& rows);

/// Throw std::runtime_error naming the file when it cannot be written.
void write_contention_csv(const std::filesystem::path& file, const std::vector<contention_row>& rows);
void write_outage_csv(const std::filesystem::path& file, const std::vector<outage_row>& rows);
/// One row per 10 ms bucket: time_ms, then one column per row (strategy, budget).
void write_arrivals_csv(const std::filesystem::path& file, const std::vector<outage_row>& rows);

/// A gnuplot script drawing one panel per strategy (budget off and on as two
/// lines) from `data` (written by write_arrivals_csv) into `image` (PNG).
std::string arrivals_gnuplot_script(const outage_study& study, const std::vector<outage_row>& rows,
                                    const std::string& data, const std::string& image);
/// Mean calls per client count: clients, then one column per strategy and budget.
void write_contention_calls_csv(const std::filesystem::path& file, const contention_study& study,
                                const std::vector<contention_row>& rows);
/// A gnuplot script drawing calls per client count, one line per strategy and budget.
std::string contention_gnuplot_script(const contention_study& study, const std::string& data,
                                      const std::string& image);
void write_text(const std::filesystem::path& file, const std::string& text);

/// The gnuplot executable on PATH, if any.
std::optional<std::filesystem::path> find_gnuplot();
/// Runs `gnuplot script` with `dir` as its working directory; returns its exit status (-1 if it could not start).
int run_gnuplot(const std::filesystem::path& gnuplot, const std::filesystem::path& dir, const std::string& script);

} // namespace herd

#endif
