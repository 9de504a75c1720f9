#include <coretry/budget.hpp>

#include <cmath>
#include <stdexcept>

namespace coretry {

token_bucket_budget::token_bucket_budget(options opts) {
  if (!std::isfinite(opts.capacity) || opts.capacity < 1.0 || opts.capacity > 1e9)
    throw std::invalid_argument("token_bucket_budget: capacity must be between 1 and 1e9 tokens");
  if (!std::isfinite(opts.tokens_per_initial_request) || opts.tokens_per_initial_request < 0.0 ||
      opts.tokens_per_initial_request > opts.capacity)
    throw std::invalid_argument(
        "token_bucket_budget: tokens_per_initial_request must be between 0 and the capacity");
  capacity_units_ = std::llround(opts.capacity * scale);
  deposit_units_ = std::llround(opts.tokens_per_initial_request * scale);
  units_.store(capacity_units_, std::memory_order_relaxed);
}

void token_bucket_budget::record_initial_request() noexcept {
  std::int64_t current = units_.load(std::memory_order_relaxed);
  std::int64_t next;
  do {
    next = current + deposit_units_;
    if (next > capacity_units_) next = capacity_units_; // overflow is lost, as in any bucket
  } while (!units_.compare_exchange_weak(current, next, std::memory_order_relaxed));
}

bool token_bucket_budget::try_acquire_retry() noexcept {
  std::int64_t current = units_.load(std::memory_order_relaxed);
  do {
    if (current < scale) return false;
  } while (!units_.compare_exchange_weak(current, current - scale, std::memory_order_relaxed));
  return true;
}

bool token_bucket_budget::retry_available() const noexcept {
  return units_.load(std::memory_order_relaxed) >= scale;
}

double token_bucket_budget::tokens() const noexcept {
  return static_cast<double>(units_.load(std::memory_order_relaxed)) / scale;
}

double token_bucket_budget::capacity() const noexcept {
  return static_cast<double>(capacity_units_) / scale;
}

} // namespace coretry
