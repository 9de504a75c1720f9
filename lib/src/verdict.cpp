#include <coretry/verdict.hpp>

namespace coretry {

std::string_view to_string(attempt_status status) noexcept {
  switch (status) {
  case attempt_status::success: return "success";
  case attempt_status::transient: return "transient";
  case attempt_status::permanent: return "permanent";
  }
  return "invalid";
}

std::string_view to_string(delivery delivered) noexcept {
  switch (delivered) {
  case delivery::unknown: return "unknown";
  case delivery::never_sent: return "never_sent";
  case delivery::answered: return "answered";
  }
  return "invalid";
}

} // namespace coretry
