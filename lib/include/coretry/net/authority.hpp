#ifndef CORETRY_NET_AUTHORITY_HPP
#define CORETRY_NET_AUTHORITY_HPP
/// @file
/// The pieces of a URL's authority that every coretry reader of addresses
/// shares: port numbers, DNS names and percent-decoding. The HTTP client's
/// URLs, proxies and pinned names and the Redis reconciler's URLs are read
/// with them.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace coretry::net {

/// Whether a port of zero is taken (a listener's "pick a free one").
enum class port_zero {
  refused, ///< 1 to 65535 only
  allowed, ///< 0 to 65535
};

/// `text` as a TCP port: one or more decimal digits and nothing else (no
/// sign, no space; leading zeros allowed), a value up to 65535, zero only as
/// `zero` allows; nullopt otherwise. A caller that bounds the number of
/// digits (an http URL's port has at most five) checks that itself.
std::optional<std::uint16_t> parse_port(std::string_view text, port_zero zero = port_zero::refused) noexcept;

/// Whether `name` is a DNS name (letters, digits, '-', '_', dots between
/// non-empty labels of at most 63 characters, at most 253 characters
/// besides one final dot, which is allowed) or an IPv4 address, which has
/// the same shape.
bool is_dns_name(std::string_view name) noexcept;

/// `text` with every `%XY` escape (two hexadecimal digits) replaced by the
/// byte it stands for; nullopt when an escape is cut short or not
/// hexadecimal. Other bytes, `+` included, are kept as they are.
std::optional<std::string> percent_decoded(std::string_view text);

} // namespace coretry::net

#endif
