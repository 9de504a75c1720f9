#ifndef CORETRY_SRC_HTTP_ADDRESS_NAMES_HPP
#define CORETRY_SRC_HTTP_ADDRESS_NAMES_HPP

// What the address book (address_book.hpp) keeps apart and how much: a
// name and port, its key in the book, the bounds of a name's list and of
// the names kept, and the order of the families in a list. Internal to
// coretry::http.

#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace coretry::http::detail {

/// Addresses of one name kept at most: a lookup that returns more is cut.
inline constexpr std::size_t max_addresses_per_name = 64;
/// Names kept at most (besides pins): beyond it the one looked up longest
/// ago is forgotten.
inline constexpr std::size_t max_names = 1024;

/// `endpoints` reordered as Happy Eyeballs v2 asks (RFC 8305 §4): the
/// families alternate, starting with the family of the first; within a
/// family the order is kept.
inline std::vector<boost::asio::ip::tcp::endpoint>
interleave_families(const std::vector<boost::asio::ip::tcp::endpoint>& endpoints) {
  if (endpoints.empty()) return {};
  const bool first_v6 = endpoints.front().address().is_v6();
  std::vector<boost::asio::ip::tcp::endpoint> first, second, out;
  for (const auto& e : endpoints) (e.address().is_v6() == first_v6 ? first : second).push_back(e);
  out.reserve(endpoints.size());
  for (std::size_t i = 0; i < std::max(first.size(), second.size()); ++i) {
    if (i < first.size()) out.push_back(first[i]);
    if (i < second.size()) out.push_back(second[i]);
  }
  return out;
}

/// A name and port as connections see them ("pricing", "8080"): what is
/// looked up, pinned, and kept apart in the book. Found without copying.
struct name_and_port {
  std::string_view host;
  std::string_view port;
};


/// A name and port as the book keeps it.
struct name_key {
  std::string host;
  std::string port;
};

/// Orders keys, and finds one from a name_and_port without copying.
struct name_key_less {
  using is_transparent = void;
  static std::tuple<std::string_view, std::string_view> view(const name_key& k) { return {k.host, k.port}; }
  static std::tuple<std::string_view, std::string_view> view(const name_and_port& n) { return {n.host, n.port}; }
  template <class A, class B> bool operator()(const A& a, const B& b) const { return view(a) < view(b); }
};

} // namespace coretry::http::detail

#endif
