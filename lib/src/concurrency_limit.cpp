#include <coretry/concurrency_limit.hpp>

#include <cmath>
#include <stdexcept>
#include <string>

namespace coretry {

namespace {

using namespace std::chrono_literals;

void check_limit_option(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("concurrency_limit: ") + what);
}

const concurrency_limit::options& checked(const concurrency_limit::options& o) {
  constexpr unsigned most = 1'000'000;
  check_limit_option(o.initial_limit >= 1 && o.initial_limit <= most, "initial_limit must be between 1 and 1000000");
  if (o.adaptive) {
    check_limit_option(o.min_limit >= 1 && o.min_limit <= o.initial_limit,
          "min_limit must be at least 1 and at most initial_limit");
    check_limit_option(o.max_limit >= o.initial_limit && o.max_limit <= most,
          "max_limit must be at least initial_limit and at most 1000000");
    check_limit_option(std::isfinite(o.tolerance) && o.tolerance >= 1.0 && o.tolerance <= 1000.0,
          "tolerance must be a number between 1 and 1000");
    check_limit_option(std::isfinite(o.decrease) && o.decrease > 0.0 && o.decrease < 1.0,
          "decrease must be a number above 0 and below 1");
    check_limit_option(o.window > duration::zero() && o.window <= duration(1h), "window must be positive and at most 1 h");
    check_limit_option(o.min_window_samples >= 1 && o.min_window_samples <= most,
          "min_window_samples must be between 1 and 1000000");
  }
  check_limit_option(o.max_wait >= duration::zero() && o.max_wait <= duration(1h), "max_wait must be between 0 and 1 h");
  check_limit_option(o.max_waiters <= most, "max_waiters must be at most 1000000");
  return o;
}

limit_model::options model_options(const concurrency_limit::options& o) {
  limit_model::options m;
  m.initial_limit = o.initial_limit;
  m.min_limit = o.min_limit;
  m.max_limit = o.max_limit;
  m.tolerance = o.tolerance;
  m.decrease = o.decrease;
  m.window = o.window;
  m.min_window_samples = o.min_window_samples;
  return m;
}

} // namespace

concurrency_limit::concurrency_limit(options opts)
    : options_(checked(opts)), limit_(options_.initial_limit), model_(model_options(options_)) {}

bool concurrency_limit::take_permit() noexcept {
  unsigned held = in_flight_.load(std::memory_order_seq_cst);
  do {
    if (held >= limit_.load(std::memory_order_relaxed)) return false;
  } while (!in_flight_.compare_exchange_weak(held, held + 1, std::memory_order_seq_cst));
  if (options_.adaptive) model_.saw_in_flight(held + 1);
  return true;
}

bool concurrency_limit::try_acquire() noexcept {
  // No barging: while anybody waits, a free permit is theirs.
  if (waiting_.load(std::memory_order_seq_cst) != 0) return false;
  if (!take_permit()) return false;
  acquired_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

concurrency_limit::wait_result concurrency_limit::wait(permit_waiter& w) noexcept {
  if (try_acquire()) return wait_result::acquired;
  std::lock_guard lock(queue_lock_);
  if (options_.max_wait == duration::zero() || waiting_.load(std::memory_order_relaxed) >= options_.max_waiters) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return wait_result::refused;
  }
  // Counted as waiting before looking for a permit again: a release that
  // gave one back after this sees a waiter and serves the queue (both
  // sides sequentially consistent, so one of them sees the other).
  waiting_.fetch_add(1, std::memory_order_seq_cst);
  if (take_permit()) {
    waiting_.fetch_sub(1, std::memory_order_relaxed);
    acquired_.fetch_add(1, std::memory_order_relaxed);
    return wait_result::acquired;
  }
  w.older_ = newest_;
  w.newer_ = nullptr;
  if (newest_) newest_->newer_ = &w;
  else oldest_ = &w;
  newest_ = &w;
  w.queued_ = true;
  w.granted_ = false;
  waited_.fetch_add(1, std::memory_order_relaxed);
  return wait_result::queued;
}

void concurrency_limit::unlink(permit_waiter& w) noexcept {
  (w.newer_ ? w.newer_->older_ : newest_) = w.older_;
  (w.older_ ? w.older_->newer_ : oldest_) = w.newer_;
  w.newer_ = w.older_ = nullptr;
  w.queued_ = false;
  waiting_.fetch_sub(1, std::memory_order_seq_cst);
}

concurrency_limit::cancel_result concurrency_limit::cancel_wait(permit_waiter& w, bool refusal) noexcept {
  std::lock_guard lock(queue_lock_);
  if (w.queued_) {
    unlink(w);
    if (refusal) refused_.fetch_add(1, std::memory_order_relaxed);
    return cancel_result::removed;
  }
  return w.granted_ ? cancel_result::granted : cancel_result::removed;
}

void concurrency_limit::release(duration now, duration latency, limit_signal signal) noexcept {
  const unsigned held = in_flight_.fetch_sub(1, std::memory_order_seq_cst) - 1;
  if (options_.adaptive) {
    // An end at or after the window's deadline closes it, then counts in the next one.
    if (model_.close_window(now, held) != limit_model::verdict::none)
      limit_.store(model_.limit(), std::memory_order_relaxed);
    if (signal != limit_signal::ignored) model_.record(latency, signal == limit_signal::drop);
  }
  if (waiting_.load(std::memory_order_seq_cst) != 0) serve_waiters();
}

void concurrency_limit::serve_waiters() noexcept {
  // Grants are made under the lock and announced after it, a few at a time
  // (nothing is allocated; a waiter is not touched after its announcement).
  constexpr int batch = 16;
  permit_waiter* granted[batch];
  for (;;) {
    int n = 0;
    bool more = false;
    {
      std::lock_guard lock(queue_lock_);
      while (newest_ && n < batch && take_permit()) {
        bool given = false;
        while (newest_) {
          permit_waiter& w = *newest_; // newest first
          unlink(w);
          if (w.accept_permit()) {
            w.granted_ = true;
            acquired_.fetch_add(1, std::memory_order_relaxed);
            granted[n++] = &w;
            given = true;
            break;
          }
        }
        if (!given) in_flight_.fetch_sub(1, std::memory_order_seq_cst); // everybody refused: back to the pool
      }
      more = newest_ != nullptr && n == batch;
    }
    for (int i = 0; i < n; ++i) granted[i]->permit_granted();
    if (!more) return;
  }
}

duration concurrency_limit::baseline() const noexcept { return model_.baseline(); }

concurrency_limit::counts concurrency_limit::totals() const noexcept {
  return {acquired_.load(std::memory_order_relaxed), waited_.load(std::memory_order_relaxed),
          refused_.load(std::memory_order_relaxed)};
}

} // namespace coretry
