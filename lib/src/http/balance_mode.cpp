#include <coretry/http/balance_mode.hpp>

namespace coretry::http {

std::string_view to_string(balance_mode mode) noexcept {
  switch (mode) {
  case balance_mode::first_to_connect: return "first_to_connect";
  case balance_mode::least_cost: return "least_cost";
  }
  return "invalid";
}

std::optional<balance_mode> parse_balance_mode(std::string_view name) noexcept {
  for (auto mode : {balance_mode::first_to_connect, balance_mode::least_cost})
    if (name == to_string(mode)) return mode;
  return std::nullopt;
}

} // namespace coretry::http
