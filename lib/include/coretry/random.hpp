#ifndef CORETRY_RANDOM_HPP
#define CORETRY_RANDOM_HPP

#include <cstdint>

namespace coretry {

/// Source of the random draws for jitter. Injected so that tests draw
/// deterministically and the decision core never touches global state.
class random_source {
public:
  virtual ~random_source() = default;
  /// A uniformly distributed integer in [0, max_inclusive].
  virtual std::uint64_t uniform(std::uint64_t max_inclusive) = 0;
};

/// The default source: one generator per thread, each seeded independently
/// from std::random_device mixed with the thread and process identity, so two
/// processes (or threads) never share a retry schedule. Thread-safe.
class independent_random final : public random_source {
public:
  std::uint64_t uniform(std::uint64_t max_inclusive) override;
  /// The process-wide instance used when an operation names no source.
  static independent_random& instance() noexcept;
};

} // namespace coretry

#endif
