#include "cli/report.hpp"

#include "cli/command_line.hpp"

#include <boost/beast/http/field.hpp>
#include <boost/json/array.hpp>

#include <cmath>
#include <cstdio>

namespace coretry::cli {
namespace {

std::string plural(unsigned count, std::string_view noun) {
  return std::to_string(count) + " " + std::string{noun} + (count == 1 ? "" : "s");
}

boost::json::value text_or_null(const std::string& text) {
  if (text.empty()) return nullptr;
  return boost::json::string{printable_utf8(text, 1000)};
}

} // namespace

timeline::timeline(std::FILE* out, std::string prefix, unsigned max_attempts, const attempt_details& details,
                   std::function<void()> before_line)
    : out_(out), prefix_(std::move(prefix)), max_attempts_(max_attempts), details_(details),
      before_line_(std::move(before_line)) {}

void timeline::line(duration at, const std::string& text) noexcept {
  try {
    if (before_line_) before_line_();
    std::fprintf(out_, "%s%9.1f ms  %s\n", prefix_.c_str(), to_ms(at), text.c_str());
    std::fflush(out_);
  } catch (...) {
    // An observer must not throw; losing a line of output is the lesser harm.
  }
}

void timeline::more(const std::string& text) noexcept {
  try {
    if (before_line_) before_line_();
    // Under the text of the line before, past its time ("%9.1f ms  ").
    std::fprintf(out_, "%s%14s%s\n", prefix_.c_str(), "", text.c_str());
    std::fflush(out_);
  } catch (...) {
  }
}

void timeline::attempt_started(const attempt_started_event& e) noexcept {
  try {
    line(e.at, "attempt " + std::to_string(e.attempt) + " of " + std::to_string(max_attempts_) +
                   " starts, allowance " + describe_duration(e.allowance));
  } catch (...) {
  }
}

void timeline::attempt_finished(const attempt_finished_event& e) noexcept {
  try {
    const attempt_record& record = e.record;
    std::string text = "attempt " + std::to_string(record.number) + " ends: " +
                       describe_attempt_result(record, details_.find(record.number)) + " -> " +
                       std::string{record.classified.category} + ", " +
                       std::string{coretry::to_string(record.classified.status)};
    if (record.classified.status == attempt_status::transient && record.classified.delivered == delivery::unknown)
      text += " (may have reached the server)";
    line(record.end, text);
    if (const attempt_detail* detail = details_.find(record.number); detail && !detail->phases.empty()) {
      more(describe_phases(*detail));
      more(describe_curl_times(detail->phases));
    }
  } catch (...) {
  }
}

void timeline::backoff_scheduled(const backoff_event& e) noexcept {
  try {
    const std::string source = e.source == wait_source::server ? "the server's Retry-After"
                               : e.source == wait_source::gate ? "the retry gate's slot"
                                                               : "local backoff";
    line(e.at, "waiting " + describe_duration(e.wait) + " before attempt " + std::to_string(e.next_attempt) + " (" +
                   source + ")");
  } catch (...) {
  }
}

void timeline::stopped(const stop_event& e) noexcept {
  try {
    line(e.at, "stop: " + std::string{coretry::to_string(e.reason)} + " after " + plural(e.attempts, "attempt") +
                   ", " + describe_duration(e.total_backoff) + " of backoff");
  } catch (...) {
  }
}

std::string describe_attempt_result(const attempt_record& record, const attempt_detail* detail) {
  if (detail && detail->status) {
    std::string text = "HTTP " + std::to_string(*detail->status);
    if (!detail->reason.empty()) text += " " + printable_utf8(detail->reason, 60);
    if (detail->retry_after) text += ", Retry-After: " + *detail->retry_after;
    if (!detail->problem.empty()) text += ": " + printable_utf8(detail->problem, 200);
    return text;
  }
  const std::string where = detail ? " while " + std::string{detail->reached} : "";
  if (record.error) return record.error.message() + where;
  if (detail && !detail->error.empty()) return detail->error + where;
  if (detail && !detail->problem.empty()) return printable_utf8(detail->problem, 200);
  return "no response";
}

namespace {

std::string milliseconds(duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f ms", to_ms(d));
  return text;
}

std::string milliseconds(const std::optional<duration>& d) { return d ? milliseconds(*d) : "-"; }

/// Milliseconds to the microsecond, for JSON.
boost::json::value json_ms(const std::optional<duration>& d) {
  if (!d) return nullptr;
  return std::round(to_ms(*d) * 1000.0) / 1000.0;
}

} // namespace

std::string describe_phases(const attempt_detail& detail) {
  std::string text = detail.reused_connection                             ? "reused connection"
                     : detail.phases.reached(phase::connect)         ? "new connection"
                                                                           : "no connection";
  if (!detail.address.empty()) text += " to " + detail.address;
  text += ':';
  std::string_view separator = " ";
  for (std::size_t i = 0; i < phase_count; ++i) {
    const auto p = static_cast<phase>(i);
    if (const auto spent = detail.phases[p]) {
      text += separator;
      text += std::string{to_string(p)} + " " + milliseconds(*spent);
      separator = ", ";
    }
  }
  return text;
}

std::string describe_curl_times(const phase_timings& phases) {
  const curl_times times = as_curl_times(phases);
  return "time_namelookup " + milliseconds(times.namelookup) + ", time_connect " + milliseconds(times.connect) +
         ", time_appconnect " + milliseconds(times.appconnect) + ", time_starttransfer " +
         milliseconds(times.starttransfer) + ", time_total " + milliseconds(times.total);
}

std::string describe_failure(const http::result& result, const attempt_details& details, std::string_view cause) {
  std::string text = std::string{coretry::to_string(result.reason)} + (cause.empty() ? "" : " by " + std::string{cause}) + " after " +
                     plural(result.attempts, "attempt") + " in " + describe_duration(result.elapsed);
  if (!result.records.empty()) {
    const attempt_record& last = result.records.back();
    text += "; last: " + describe_attempt_result(last, details.find(last.number)) + " (" +
            std::string{last.classified.category} + ")";
  }
  return text;
}

boost::json::object describe_outcome(const http::result& result, const attempt_details& details) {
  boost::json::object json;
  json["stop_reason"] = coretry::to_string(result.reason);
  json["succeeded"] = result.succeeded();
  json["attempts"] = result.attempts;

  const http::response* response = result.value && result.value->res ? &*result.value->res : nullptr;
  json["status"] = response ? boost::json::value(response->result_int()) : nullptr;
  json["category"] = result.records.empty() ? boost::json::value(nullptr)
                                            : boost::json::value(result.records.back().classified.category);
  json["elapsed_ms"] = whole_ms(result.elapsed);
  json["total_backoff_ms"] = whole_ms(result.total_backoff);
  const attempt_detail* last = result.records.empty() ? nullptr : details.find(result.records.back().number);
  json["error"] = last ? text_or_null(last->error) : nullptr;
  json["problem"] = last ? text_or_null(last->problem) : nullptr;
  if (response) {
    json["body_bytes"] = response->body().size();
    json["body_start"] = printable_utf8(response->body(), attempt_details::body_start_limit);
    const auto type = response->find(boost::beast::http::field::content_type);
    json["content_type"] = type == response->end() ? boost::json::value(nullptr)
                                                   : boost::json::value(printable_utf8(type->value(), 200));
  } else {
    json["body_bytes"] = nullptr;
    json["body_start"] = nullptr;
    json["content_type"] = nullptr;
  }

  boost::json::array log;
  for (const attempt_record& record : result.records) {
    const attempt_detail* detail = details.find(record.number);
    boost::json::object entry;
    entry["attempt"] = record.number;
    entry["status"] = detail && detail->status ? boost::json::value(*detail->status) : nullptr;
    entry["category"] = record.classified.category;
    entry["verdict"] = coretry::to_string(record.classified.status);
    entry["delivery"] = coretry::to_string(record.classified.delivered);
    entry["wait_before_ms"] = whole_ms(record.wait_before);
    entry["wait_source"] = coretry::to_string(record.wait_from);
    entry["start_ms"] = whole_ms(record.start);
    entry["end_ms"] = whole_ms(record.end);
    entry["allowance_ms"] = whole_ms(record.allowance);
    entry["server_delay_ms"] =
        record.classified.server_delay ? boost::json::value(whole_ms(*record.classified.server_delay)) : nullptr;
    entry["retry_after"] = detail && detail->retry_after ? boost::json::value(*detail->retry_after) : nullptr;
    entry["error"] = detail ? text_or_null(detail->error) : nullptr;
    entry["problem"] = detail ? text_or_null(detail->problem) : nullptr;
    entry["reached"] = detail ? boost::json::value(detail->reached) : nullptr;
    entry["reused_connection"] = detail ? boost::json::value(detail->reused_connection) : nullptr;
    entry["address"] = detail ? text_or_null(detail->address) : nullptr;
    // Milliseconds to the microsecond; null for a phase the attempt never
    // reached, and for an attempt that never asked for a connection.
    if (detail && !detail->phases.empty()) {
      boost::json::object phases;
      for (std::size_t i = 0; i < phase_count; ++i) {
        const auto p = static_cast<phase>(i);
        phases[to_string(p)] = json_ms(detail->phases[p]);
      }
      entry["phases_ms"] = std::move(phases);
      const curl_times times = as_curl_times(detail->phases);
      entry["time_namelookup_ms"] = json_ms(times.namelookup);
      entry["time_connect_ms"] = json_ms(times.connect);
      entry["time_appconnect_ms"] = json_ms(times.appconnect);
      entry["time_starttransfer_ms"] = json_ms(times.starttransfer);
      entry["time_total_ms"] = json_ms(times.total);
    } else {
      entry["phases_ms"] = nullptr;
      entry["time_namelookup_ms"] = nullptr;
      entry["time_connect_ms"] = nullptr;
      entry["time_appconnect_ms"] = nullptr;
      entry["time_starttransfer_ms"] = nullptr;
      entry["time_total_ms"] = nullptr;
    }
    log.push_back(std::move(entry));
  }
  json["attempt_log"] = std::move(log);
  return json;
}

} // namespace coretry::cli
