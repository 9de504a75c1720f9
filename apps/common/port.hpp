#ifndef CORETRY_COMMON_PORT_HPP
#define CORETRY_COMMON_PORT_HPP

#include <cstdint>
#include <optional>
#include <string_view>

namespace coretry::common {

/// What port 0 means where a port is read: to a server it asks the system
/// for any free port; to a client it is no port at all.
enum class port_zero { refused, picks_free };

/// The TCP port written as `text`: one to five ASCII digits (no sign, no
/// space) whose value is 1 to 65535, or 0 too with port_zero::picks_free.
/// Anything else (empty, "80x", "65536", "-1", "+80") is nullopt.
std::optional<std::uint16_t> parse_port(std::string_view text, port_zero zero = port_zero::refused);

} // namespace coretry::common

#endif
