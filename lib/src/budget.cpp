#include <coretry/budget.hpp>

#include <algorithm>
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

leased_budget::leased_budget(options opts) : options_(opts), local_(bucket_options(opts)) {
  if (opts.max_lease < 1 || opts.max_lease > 1000)
    throw std::invalid_argument("leased_budget: max_lease must be between 1 and 1000 tokens");
  capacity_units_ = std::llround(opts.capacity * units_per_token);
  deposit_units_ = std::llround(opts.tokens_per_initial_request * units_per_token);
}

void leased_budget::record_initial_request() noexcept {
  local_.record_initial_request();
  // A deposit made while local stays local: the fleet never hears of it
  // twice (once spent here, once in its bucket).
  if (deposit_units_ == 0 || !shared_.load(std::memory_order_acquire)) return;
  std::int64_t current = pending_units_.load(std::memory_order_relaxed);
  do {
    if (current >= capacity_units_) return; // more could not fit in the fleet's bucket either
  } while (!pending_units_.compare_exchange_weak(current, std::min(capacity_units_, current + deposit_units_),
                                                 std::memory_order_relaxed));
}

bool leased_budget::try_acquire_retry() noexcept {
  if (!shared_.load(std::memory_order_acquire)) return local_.try_acquire_retry();
  std::int64_t current = lease_.load(std::memory_order_relaxed);
  do {
    if (current <= 0) return false;
  } while (!lease_.compare_exchange_weak(current, current - 1, std::memory_order_relaxed));
  // The local bucket pays too, where it can: after a fall back this process
  // has what it would have had alone, not a full bucket on top of what it
  // spent while shared.
  (void)local_.try_acquire_retry();
  return true;
}

bool leased_budget::retry_available() const noexcept {
  if (!shared_.load(std::memory_order_acquire)) return local_.retry_available();
  return lease_.load(std::memory_order_relaxed) > 0;
}

leased_budget::request leased_budget::begin_exchange() noexcept {
  request r;
  r.deposit_units = pending_units_.exchange(0, std::memory_order_relaxed);
  const std::int64_t held = lease_.load(std::memory_order_relaxed);
  r.want = held >= options_.max_lease ? 0u : static_cast<unsigned>(options_.max_lease - held);
  return r;
}

void leased_budget::exchange_succeeded(unsigned granted) noexcept {
  const std::int64_t add = std::min<std::int64_t>(granted, options_.max_lease);
  lease_.fetch_add(add, std::memory_order_relaxed);
  shared_.store(true, std::memory_order_release);
}

bool leased_budget::exchange_failed() noexcept {
  return shared_.exchange(false, std::memory_order_acq_rel);
}

} // namespace coretry
