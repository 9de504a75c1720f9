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

/// The local side of a token bucket a fleet of processes shares (through a
/// store such as Redis, see coretry::redis::shared_state): retries are paid
/// with tokens leased from the fleet's bucket in small batches, deposits are
/// passed on in batches, and no call on the hot path waits for the store.
/// The store is reached by a reconciler, one exchange at a time:
/// begin_exchange() says what to send, exchange_succeeded() or
/// exchange_failed() what came back.
///
/// **Shared** (the initial state): a retry takes one leased token; with none
/// leased it is denied until an exchange brings tokens. A process starts
/// with none, so the fleet's bound holds even for the requests that arrive
/// before its first exchange: the fleet sends at most the fleet bucket's
/// capacity plus its deposits, however many processes share it.
///
/// **Local** (after an exchange failed, until one succeeds): retries are
/// paid from a token bucket of this process's own, as token_bucket_budget
/// does. It receives every deposit and pays (where it can) for every retry,
/// shared or not, so that after a fall back the process has what it would
/// have had on its own; while local, each process of the fleet may spend its
/// own bucket, and its deposits stay local (they are not passed on when
/// sharing resumes). Leased tokens are kept for when sharing resumes.
///
/// Thread-safe; the hot path (record_initial_request, try_acquire_retry,
/// retry_available) takes no lock and allocates nothing.
class leased_budget final : public retry_budget {
public:
  struct options {
    /// The fleet's bucket and the local fallback bucket (the same rule).
    double capacity = 20.0;
    double tokens_per_initial_request = 0.1;
    /// The most tokens one process holds leased (1 to 1000).
    unsigned max_lease = 5;
  };
  /// What one exchange sends to the fleet's bucket.
  struct request {
    /// Deposits since the last exchange, in millionths of a token (at most
    /// the capacity's worth: more would overflow the bucket anyway).
    std::int64_t deposit_units = 0;
    /// Tokens wanted: max_lease less those held.
    unsigned want = 0;
  };
  static constexpr std::int64_t units_per_token = 1'000'000;

  leased_budget() : leased_budget(options{}) {}
  /// Throws std::invalid_argument naming the bad option.
  explicit leased_budget(options opts);

  void record_initial_request() noexcept override;
  bool try_acquire_retry() noexcept override;
  bool retry_available() const noexcept override;

  /// Takes the deposits gathered since the last exchange and says how many
  /// tokens to ask for. Only the reconciler calls it, one exchange at a time.
  request begin_exchange() noexcept;
  /// The fleet's bucket granted `granted` tokens (at most the request's
  /// want): they are leased, and the budget is shared.
  void exchange_succeeded(unsigned granted) noexcept;
  /// The exchange failed (the store is unreachable, slow or refused): the
  /// budget is local until an exchange succeeds. The request's deposits are
  /// dropped, never sent twice: a failed exchange may still have reached the
  /// store. Returns true when this changed the budget from shared to local.
  bool exchange_failed() noexcept;

  /// Whether retries are paid from the fleet's bucket now.
  bool shared() const noexcept { return shared_.load(std::memory_order_acquire); }
  /// Deposits gathered since the last exchange, in millionths of a token.
  std::int64_t pending_deposit_units() const noexcept { return pending_units_.load(std::memory_order_relaxed); }
  /// Tokens leased and not yet spent.
  unsigned leased() const noexcept { return static_cast<unsigned>(lease_.load(std::memory_order_relaxed)); }
  /// The options in force.
  const options& settings() const noexcept { return options_; }
  /// The bucket's capacity in millionths of a token.
  std::int64_t capacity_units() const noexcept { return capacity_units_; }
  /// Tokens in the local fallback bucket.
  double local_tokens() const noexcept { return local_.tokens(); }

private:
  static token_bucket_budget::options bucket_options(const options& o) {
    return {o.capacity, o.tokens_per_initial_request};
  }
  options options_;
  std::int64_t deposit_units_;
  std::int64_t capacity_units_;
  token_bucket_budget local_;
  std::atomic<bool> shared_{true};
  std::atomic<std::int64_t> lease_{0};
  std::atomic<std::int64_t> pending_units_{0};
};

} // namespace coretry

#endif
