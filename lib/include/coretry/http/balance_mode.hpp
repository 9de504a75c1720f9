#ifndef CORETRY_HTTP_BALANCE_MODE_HPP
#define CORETRY_HTTP_BALANCE_MODE_HPP
/// @file
/// How the client chooses among a name's addresses (client_options::balance).

#include <optional>
#include <string_view>

namespace coretry::http {

/// How a request's address is chosen when its name has several.
enum class balance_mode {
  /// No choice is made: a new connection races the addresses in the
  /// address book's order and the first to connect serves; any pooled
  /// connection that suits serves.
  first_to_connect,
  /// Power of two choices over a cost per address (peak EWMA latency x
  /// the square root of requests in flight plus one), with slow start for an address that is
  /// new or back from an ejection: the default.
  least_cost,
};

/// "first_to_connect" or "least_cost".
std::string_view to_string(balance_mode mode) noexcept;

/// The mode named `name` (as to_string writes it); none for any other text.
std::optional<balance_mode> parse_balance_mode(std::string_view name) noexcept;

} // namespace coretry::http

#endif
