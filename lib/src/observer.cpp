#include <coretry/attempt_record.hpp>
#include <coretry/observer.hpp>
#include <coretry/wait_source.hpp>

#include <algorithm>

namespace coretry {

std::string_view to_string(wait_source source) noexcept {
  switch (source) {
  case wait_source::none: return "none";
  case wait_source::local: return "local";
  case wait_source::server: return "server";
  case wait_source::gate: return "gate";
  }
  return "invalid";
}

std::string_view to_string(connection_use use) noexcept {
  switch (use) {
  case connection_use::none: return "none";
  case connection_use::fresh: return "new";
  case connection_use::reused: return "reused";
  }
  return "invalid";
}

std::string_view to_string(attempt_kind kind) noexcept {
  switch (kind) {
  case attempt_kind::first: return "first";
  case attempt_kind::retry: return "retry";
  case attempt_kind::hedge: return "hedge";
  }
  return "invalid";
}

namespace {
constexpr auto relaxed = std::memory_order_relaxed;
}

void retry_counters::attempt_started(const attempt_started_event& e) noexcept {
  attempts_.fetch_add(1, relaxed);
  if (e.attempt == 1) operations_.fetch_add(1, relaxed);
}

void retry_counters::attempt_finished(const attempt_finished_event& e) noexcept {
  if (e.record.number == 1 && e.record.classified.status == attempt_status::success)
    initial_successes_.fetch_add(1, relaxed);
}

void retry_counters::backoff_scheduled(const backoff_event& e) noexcept {
  backoff_ns_.fetch_add(e.wait.count(), relaxed);
}

void retry_counters::stopped(const stop_event& e) noexcept {
  stops_[static_cast<std::size_t>(e.reason)].fetch_add(1, relaxed);
  if (e.reason == stop_reason::succeeded) final_successes_.fetch_add(1, relaxed);
  if (e.reason == stop_reason::cancelled) cancellations_.fetch_add(1, relaxed);
  // An operation stopped before its first attempt (deadline already gone) is
  // counted among operations through its stop, not its attempts.
  if (e.attempts == 0) {
    operations_.fetch_add(1, relaxed);
    return;
  }
  const std::size_t bucket = std::min<std::size_t>(e.attempts, attempt_buckets) - 1;
  per_operation_[bucket].fetch_add(1, relaxed);
}

std::string_view to_string(hedge_result result) noexcept {
  switch (result) {
  case hedge_result::sent: return "sent";
  case hedge_result::won: return "won";
  case hedge_result::refused_budget: return "refused_budget";
  case hedge_result::refused_gate: return "refused_gate";
  case hedge_result::refused_limit: return "refused_limit";
  }
  return "invalid";
}

void retry_counters::hedge(const hedge_event& e) noexcept {
  hedges_[static_cast<std::size_t>(e.result)].fetch_add(1, relaxed);
}

retry_counters::snapshot retry_counters::read() const noexcept {
  snapshot s;
  s.operations = operations_.load(relaxed);
  s.attempts = attempts_.load(relaxed);
  s.initial_successes = initial_successes_.load(relaxed);
  s.final_successes = final_successes_.load(relaxed);
  s.cancellations = cancellations_.load(relaxed);
  s.total_backoff = duration(backoff_ns_.load(relaxed));
  for (std::size_t i = 0; i < attempt_buckets; ++i) s.attempts_per_operation[i] = per_operation_[i].load(relaxed);
  for (std::size_t i = 0; i < stops_.size(); ++i) s.stops[i] = stops_[i].load(relaxed);
  s.hedges_sent = hedges_[static_cast<std::size_t>(hedge_result::sent)].load(relaxed);
  s.hedges_won = hedges_[static_cast<std::size_t>(hedge_result::won)].load(relaxed);
  s.hedges_refused_budget = hedges_[static_cast<std::size_t>(hedge_result::refused_budget)].load(relaxed);
  s.hedges_refused_gate = hedges_[static_cast<std::size_t>(hedge_result::refused_gate)].load(relaxed);
  s.hedges_refused_limit = hedges_[static_cast<std::size_t>(hedge_result::refused_limit)].load(relaxed);
  return s;
}

} // namespace coretry
