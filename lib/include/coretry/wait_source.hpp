#ifndef CORETRY_WAIT_SOURCE_HPP
#define CORETRY_WAIT_SOURCE_HPP

#include <string_view>

namespace coretry {

/// Where a wait before an attempt came from.
enum class wait_source {
  none,   ///< no wait (the first attempt)
  local,  ///< the local backoff policy
  server, ///< the peer's delay (Retry-After) was the larger part
  gate,   ///< the retry gate held the retry until its slot (after the backoff)
};

std::string_view to_string(wait_source source) noexcept;

} // namespace coretry

#endif
