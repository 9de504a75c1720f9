#ifndef CORETRY_BUDGET_HPP
#define CORETRY_BUDGET_HPP

#include <atomic>
#include <cstdint>

namespace coretry {

/// Bounds the extra load retries add across many operations. Shared by
/// operations on any thread: implementations must be thread-safe.
class retry_budget {
public:
  virtual ~retry_budget() = default;
  /// Called once per logical operation, when its first attempt starts.
  virtual void record_initial_request() noexcept = 0;
  /// Called immediately before a retry is sent; false denies the retry.
  virtual bool try_acquire_retry() noexcept = 0;
  /// Whether a retry would be admitted now, taking nothing: asked before the
  /// backoff sleep, so that an operation the budget will refuse stops at
  /// once instead of sleeping first. The token is still taken only by
  /// try_acquire_retry, after the sleep.
  virtual bool retry_available() const noexcept { return true; }
};

/// A token bucket: starts full; every initial request deposits
/// `tokens_per_initial_request` (fractions accumulate exactly); every retry
/// takes one whole token. From a full start, N initial requests admit at most
/// capacity + floor(N x tokens_per_initial_request) retries.
class token_bucket_budget final : public retry_budget {
public:
  struct options {
    double capacity = 20.0;
    double tokens_per_initial_request = 0.1;
  };

  token_bucket_budget() : token_bucket_budget(options{}) {}
  /// Throws std::invalid_argument naming the bad option.
  explicit token_bucket_budget(options opts);

  void record_initial_request() noexcept override;
  bool try_acquire_retry() noexcept override;
  bool retry_available() const noexcept override;

  /// Current tokens (fractional), for metrics.
  double tokens() const noexcept;
  double capacity() const noexcept;

private:
  // Fixed point: one token is `scale` units, so deposits of 0.1 add up exactly.
  static constexpr std::int64_t scale = 1'000'000;
  std::int64_t capacity_units_;
  std::int64_t deposit_units_;
  std::atomic<std::int64_t> units_;
};

} // namespace coretry

#endif
