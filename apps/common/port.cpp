#include "common/port.hpp"

namespace coretry::common {

std::optional<std::uint16_t> parse_port(std::string_view text, port_zero zero) {
  if (text.empty() || text.size() > 5) return std::nullopt;
  std::uint32_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<std::uint32_t>(c - '0');
  }
  if (value > 65535) return std::nullopt;
  if (value == 0 && zero == port_zero::refused) return std::nullopt;
  return static_cast<std::uint16_t>(value);
}

} // namespace coretry::common
