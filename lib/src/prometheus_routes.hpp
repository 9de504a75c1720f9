#ifndef CORETRY_SRC_PROMETHEUS_ROUTES_HPP
#define CORETRY_SRC_PROMETHEUS_ROUTES_HPP

// The route templates a Prometheus observer is made with: checked the same
// way by every one of them. Internal to coretry::prometheus.

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace coretry::detail {

/// Throws std::invalid_argument for an empty route, the reserved "other"
/// (unknown operations are counted under it), or a route given twice.
inline void check_routes(const std::vector<std::string>& routes) {
  for (std::size_t i = 0; i < routes.size(); ++i) {
    const std::string& route = routes[i];
    if (route.empty()) throw std::invalid_argument("a route template may not be empty");
    if (route == "other") throw std::invalid_argument("route 'other' is reserved for unknown operations");
    for (std::size_t j = 0; j < i; ++j)
      if (routes[j] == route) throw std::invalid_argument("route '" + route + "' is given twice");
  }
}

/// The entry (a pointer to something with a `name`) of `route` in
/// `entries`, whose last entry is "other", for any route not given. Few
/// routes: a linear scan beats hashing and needs no lock.
template <class Entries>
auto& find_route(const Entries& entries, std::string_view route) noexcept {
  for (std::size_t i = 0; i + 1 < entries.size(); ++i)
    if (entries[i]->name == route) return *entries[i];
  return *entries.back();
}

} // namespace coretry::detail

#endif
