#include <coretry/policy.hpp>

#include <algorithm>
#include <cmath>

namespace coretry {

std::string_view to_string(jitter_kind kind) noexcept {
  switch (kind) {
  case jitter_kind::none: return "none";
  case jitter_kind::full: return "full";
  case jitter_kind::equal: return "equal";
  case jitter_kind::decorrelated: return "decorrelated";
  }
  return "invalid";
}

std::optional<jitter_kind> parse_jitter_kind(std::string_view name) noexcept {
  for (auto kind : {jitter_kind::none, jitter_kind::full, jitter_kind::equal, jitter_kind::decorrelated})
    if (name == to_string(kind)) return kind;
  return std::nullopt;
}

std::optional<std::string> policy::validate() const {
  if (max_attempts == 0) return "max_attempts must be at least 1 (it counts the first attempt)";
  if (overall_deadline <= duration::zero()) return "overall_deadline must be positive";
  if (attempt_limit <= duration::zero()) return "attempt_limit must be positive";
  if (min_attempt_allowance < duration::zero()) return "min_attempt_allowance must not be negative";
  if (completion_reserve < duration::zero()) return "completion_reserve must not be negative";
  if (min_attempt_allowance > attempt_limit)
    return "min_attempt_allowance is larger than attempt_limit: no attempt could ever start";
  // Compared by subtraction: the sum of two huge values would overflow. An
  // attempt needs a positive allowance of at least the minimum.
  if (overall_deadline != duration::max() &&
      completion_reserve > overall_deadline - std::max(min_attempt_allowance, duration(1)))
    return "completion_reserve plus min_attempt_allowance leave no time within overall_deadline: no attempt could "
           "ever start";
  if (backoff.initial_window < duration::zero()) return "backoff initial_window must not be negative";
  if (!std::isfinite(backoff.multiplier) || backoff.multiplier < 1.0)
    return "backoff multiplier must be a finite number of at least 1";
  if (backoff.max_window < backoff.initial_window)
    return "backoff max_window is smaller than initial_window";
  if (backoff.floor < duration::zero()) return "backoff floor must not be negative";
  if (server_delay_spread < duration::zero()) return "server_delay_spread must not be negative";
  if (timer_slack < duration::zero()) return "timer_slack must not be negative";
  if (hedging.max_hedges > max_hedges_cap)
    return "hedging max_hedges must be at most " + std::to_string(max_hedges_cap);
  if (hedging.max_hedges > 0 && hedging.delay <= duration::zero())
    return "hedging delay must be positive when max_hedges is set";
  if (hedging.delay_percentile &&
      (!std::isfinite(*hedging.delay_percentile) || *hedging.delay_percentile <= 0.0 || *hedging.delay_percentile > 100.0))
    return "hedging delay_percentile must be a number above 0 and at most 100";
  if (hedging.min_successes < 1 || hedging.min_successes > 1'000'000)
    return "hedging min_successes must be from 1 to 1000000";
  if (observed) {
    const observed_limit& o = *observed;
    if (!std::isfinite(o.percentile) || o.percentile <= 0.0 || o.percentile > 100.0)
      return "observed percentile must be a number above 0 and at most 100";
    if (!std::isfinite(o.margin) || o.margin < 1.0 || o.margin > 100.0)
      return "observed margin must be a number from 1 to 100";
    if (o.floor <= duration::zero()) return "observed floor must be positive";
    if (o.ceiling < o.floor) return "observed ceiling is smaller than its floor";
    if (o.warm_up > 1'000'000) return "observed warm_up must be at most 1000000";
  }
  switch (backoff.jitter) {
  case jitter_kind::none: case jitter_kind::full: case jitter_kind::equal: case jitter_kind::decorrelated: break;
  default: return "backoff jitter is not a known jitter_kind";
  }
  return std::nullopt;
}

} // namespace coretry
