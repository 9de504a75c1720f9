#include "common/port.hpp"

#include <coretry/net/authority.hpp>

namespace coretry::common {

std::optional<std::uint16_t> parse_port(std::string_view text, port_zero zero) {
  // The library's reading of a port, with the programs' bound of five digits.
  if (text.size() > 5) return std::nullopt;
  return net::parse_port(text, zero == port_zero::picks_free ? net::port_zero::allowed : net::port_zero::refused);
}

} // namespace coretry::common
