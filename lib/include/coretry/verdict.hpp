#ifndef CORETRY_VERDICT_HPP
#define CORETRY_VERDICT_HPP

#include <coretry/policy.hpp>

#include <optional>
#include <string_view>

namespace coretry {

/// What one attempt's result means for the operation.
enum class attempt_status {
  success,   ///< a complete, usable result
  transient, ///< a failure another attempt could fix
  permanent, ///< a failure that repeating cannot change
};

/// What is known about whether an attempt reached its peer.
enum class delivery {
  unknown,   ///< it may have been received and applied (a timeout after sending)
  never_sent, ///< provably never reached the peer: safe to repeat whatever the operation
  answered,  ///< the peer answered definitely (for example with an HTTP status)
};

/// Stable snake_case name of a status ("success", "transient", "permanent"),
/// as used in logs and JSON.
std::string_view to_string(attempt_status status) noexcept;
/// Stable snake_case name of a delivery ("unknown", "never_sent", "answered"),
/// as used in logs and JSON.
std::string_view to_string(delivery delivered) noexcept;

/// Whether repeating the whole operation is safe, whatever one attempt did.
enum class repeat_safety {
  unsafe,          ///< repeating may apply the effect twice
  idempotent,      ///< repeating preserves the intended effect
  idempotency_key, ///< the peer deduplicates repeats by a key sent with every attempt
};

/// The classification of one attempt. Bounded `category` strings name the
/// failure for metrics and logs ("timeout", "http_503", ...): never put
/// unbounded data (URLs, bodies) in them. The category must refer to static
/// storage (a string literal): records keep the view.
struct verdict {
  attempt_status status = attempt_status::permanent;
  delivery delivered = delivery::unknown;
  /// A minimum wait the peer asked for (HTTP Retry-After), when it gave a valid one.
  std::optional<duration> server_delay;
  std::string_view category = "unclassified";
  /// The attempt showed the dependency overloaded: it timed out, or the
  /// dependency shed it (HTTP 503 or 429, a refused connection). A
  /// concurrency limit (retry_options::limit) lowers itself on it.
  bool overload = false;

  /// This verdict, marked as a sign of overload.
  constexpr verdict overloaded() const noexcept {
    verdict v = *this;
    v.overload = true;
    return v;
  }

  static constexpr verdict success(std::string_view category = "success") noexcept {
    return {attempt_status::success, delivery::answered, std::nullopt, category};
  }
  static constexpr verdict transient(std::string_view category, delivery d = delivery::unknown,
                                     std::optional<duration> server_delay = std::nullopt) noexcept {
    return {attempt_status::transient, d, server_delay, category};
  }
  static constexpr verdict permanent(std::string_view category, delivery d = delivery::answered) noexcept {
    return {attempt_status::permanent, d, std::nullopt, category};
  }
};

} // namespace coretry

#endif
