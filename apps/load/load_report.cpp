#include "load/load_report.hpp"

#include <cstdio>
#include <optional>

namespace coretry::load {
namespace {

double ms(std::chrono::nanoseconds duration) { return std::chrono::duration<double, std::milli>(duration).count(); }

std::string format(const char* pattern, auto... values) {
  char text[512];
  std::snprintf(text, sizeof text, pattern, values...);
  return text;
}

std::string cell(std::optional<double> value, const char* pattern) {
  return value ? format(pattern, *value) : std::string{"-"};
}

std::string json_number(std::optional<double> value) { return value ? format("%.3f", *value) : std::string{"null"}; }

// The counts both forms share, as JSON members.
std::string json_counts(const window_report& w) {
  return format("\"sent\":%llu,\"not_sent\":%llu,\"status_200\":%llu,\"status_503\":%llu,\"status_504\":%llu,"
                "\"status_other\":%llu,\"timeouts\":%llu,\"errors\":%llu,\"goodput\":%.3f,",
                static_cast<unsigned long long>(w.sent), static_cast<unsigned long long>(w.not_sent),
                static_cast<unsigned long long>(w.status_200), static_cast<unsigned long long>(w.status_503),
                static_cast<unsigned long long>(w.status_504), static_cast<unsigned long long>(w.status_other),
                static_cast<unsigned long long>(w.timeouts), static_cast<unsigned long long>(w.errors),
                w.goodput()) +
         "\"p50_ms\":" + json_number(w.p50_ms) + ",\"p99_ms\":" + json_number(w.p99_ms) +
         ",\"non200_fast_share\":" + json_number(w.non200_fast_share()) + format(",\"max_lag_ms\":%.3f", w.max_lag_ms);
}

} // namespace

std::string table_heading() {
  return "  start_s phase    rate   sent    200    503    504  other timeout  error nosent goodput/s   p50_ms   "
         "p99_ms non200<10ms  conns\n";
}

std::string table_row(const window_report& w) {
  return format("%9.3f %5zu %7.1f %6llu %6llu %6llu %6llu %6llu %7llu %6llu %6llu %9.1f %8s %8s %11s %6zu\n",
                ms(w.start) / 1000, w.phase + 1, w.rate, static_cast<unsigned long long>(w.sent),
                static_cast<unsigned long long>(w.status_200), static_cast<unsigned long long>(w.status_503),
                static_cast<unsigned long long>(w.status_504), static_cast<unsigned long long>(w.status_other),
                static_cast<unsigned long long>(w.timeouts), static_cast<unsigned long long>(w.errors),
                static_cast<unsigned long long>(w.not_sent), w.goodput(), cell(w.p50_ms, "%.2f").c_str(),
                cell(w.p99_ms, "%.2f").c_str(),
                cell(w.non200_fast_share() ? std::optional<double>{*w.non200_fast_share() * 100} : std::nullopt,
                     "%.1f%%")
                    .c_str(),
                w.connections);
}

std::string table_summary(const run_summary& s) {
  const window_report& w = s.totals;
  return format("whole run: %.3f s, seed %llu: sent %llu, 200 %llu, 503 %llu, 504 %llu, other %llu, timeouts %llu, "
                "errors %llu, not sent %llu; goodput %.1f/s; p50 %s ms, p99 %s ms; generator CPU %.2f s, "
                "worst send lag %.2f ms\n",
                ms(w.length) / 1000, static_cast<unsigned long long>(s.seed),
                static_cast<unsigned long long>(w.sent), static_cast<unsigned long long>(w.status_200),
                static_cast<unsigned long long>(w.status_503), static_cast<unsigned long long>(w.status_504),
                static_cast<unsigned long long>(w.status_other), static_cast<unsigned long long>(w.timeouts),
                static_cast<unsigned long long>(w.errors), static_cast<unsigned long long>(w.not_sent), w.goodput(),
                cell(w.p50_ms, "%.2f").c_str(), cell(w.p99_ms, "%.2f").c_str(), s.cpu_seconds, w.max_lag_ms);
}

std::string json_line(const window_report& w) {
  return format("{\"window\":%zu,\"start_ms\":%.3f,\"length_ms\":%.3f,\"phase\":%zu,\"rate\":%.3f,", w.index,
                ms(w.start), ms(w.length), w.phase + 1, w.rate) +
         json_counts(w) + format(",\"connections\":%zu,\"outstanding\":%zu}", w.connections, w.outstanding);
}

std::string json_summary(const run_summary& s) {
  return format("{\"summary\":true,\"seed\":%llu,\"length_ms\":%.3f,", static_cast<unsigned long long>(s.seed),
                ms(s.totals.length)) +
         json_counts(s.totals) + format(",\"cpu_s\":%.3f}", s.cpu_seconds);
}

} // namespace coretry::load
