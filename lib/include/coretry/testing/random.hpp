#ifndef CORETRY_TESTING_RANDOM_HPP
#define CORETRY_TESTING_RANDOM_HPP

/// @file
/// Deterministic random sources for tests and simulations: scripted draws
/// and seeded pseudo-random draws.

#include <coretry/random.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

namespace coretry::testing {

/// Deterministic draws for tests: each draw returns round(fraction x max) for
/// the next scripted fraction in [0, 1]. Running out is a test bug: it throws.
class scripted_random final : public random_source {
public:
  scripted_random(std::initializer_list<double> fractions);
  std::uint64_t uniform(std::uint64_t max_inclusive) override;
  std::size_t draws_used() const noexcept { return next_; }

private:
  std::vector<double> fractions_;
  std::size_t next_ = 0;
};

/// A reproducible pseudo-random source for simulations: same seed, same draws.
class seeded_random final : public random_source {
public:
  explicit seeded_random(std::uint64_t seed) noexcept : state_(seed) {}
  std::uint64_t uniform(std::uint64_t max_inclusive) override;

private:
  std::uint64_t next() noexcept;
  std::uint64_t state_;
};

} // namespace coretry::testing

#endif
