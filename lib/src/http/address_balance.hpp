#ifndef CORETRY_SRC_HTTP_ADDRESS_BALANCE_HPP
#define CORETRY_SRC_HTTP_ADDRESS_BALANCE_HPP

// One name's balancer as the address book keeps it (address_book.hpp),
// under the book's lock: present only for a name of two addresses or more
// in balance_mode::least_cost (a name of one address pays nothing, not even
// the balancer's 2 KiB), carried over a new list (an address still listed
// keeps its record, a new one starts slow), with each address's count of
// requests. Slots are the book's list positions. The rule itself is
// balancer.hpp's. Internal to coretry::http.

#include "balancer.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

namespace coretry::http::detail {

/// An address's load as the book shows it (address_stats::spread).
struct slot_load {
  std::uint64_t requests = 0;
  unsigned outstanding = 0;
  double cost = 0;
};

template <class TimePoint>
class name_balance {
public:
  using endpoint = boost::asio::ip::tcp::endpoint;
  using duration_type = typename TimePoint::duration;

  /// Whether the name is balanced.
  explicit operator bool() const noexcept { return state_ != nullptr; }

  /// The name's list went from `before` to `after` at `now`. Returns +1
  /// when the name became balanced, -1 when it stopped being, else 0.
  int relist(balance_mode mode, std::span<const endpoint> before, std::span<const endpoint> after, TimePoint now) {
    const bool was = state_ != nullptr;
    if (mode != balance_mode::least_cost || after.size() < 2) {
      state_.reset();
      return was ? -1 : 0;
    }
    const std::size_t n = std::min(after.size(), max_balanced_addresses);
    if (!state_) {
      state_ = std::make_unique<state>();
      state_->balancer.assign(n, now);
      return 1;
    }
    std::array<std::size_t, max_balanced_addresses> previous{};
    std::array<std::uint64_t, max_balanced_addresses> requests{};
    for (std::size_t i = 0; i < n; ++i) {
      const auto found = std::find(before.begin(), before.end(), after[i]);
      const auto at = static_cast<std::size_t>(found - before.begin());
      previous[i] = found == before.end() || at >= state_->balancer.size() ? basic_balancer<TimePoint>::npos : at;
      if (previous[i] != basic_balancer<TimePoint>::npos) requests[i] = state_->requests[at];
    }
    state_->balancer.relist(std::span<const std::size_t>(previous.data(), n), now);
    state_->requests = requests;
    return 0;
  }

  /// balancer.hpp's pick; none when not balanced.
  template <class Random>
  std::optional<std::size_t> pick(address_set candidates, address_set avoid, TimePoint now, Random& random) const {
    if (!state_) return std::nullopt;
    return state_->balancer.pick(candidates, avoid, now, random);
  }

  void returned(std::size_t i, TimePoint now) noexcept {
    if (state_) state_->balancer.returned(i, now);
  }
  /// A request to slot `i` started (in flight; among its requests unless
  /// it is one `again`: a re-send within its attempt); false when nothing
  /// was counted.
  bool started(std::size_t i, bool again = false) noexcept {
    if (!state_ || i >= state_->balancer.size()) return false;
    state_->balancer.started(i);
    if (!again) ++state_->requests[i];
    return true;
  }
  /// A request to `i` ended: answered after `latency` (a sample), or not.
  void ended(std::size_t i, std::optional<duration_type> latency, TimePoint now) noexcept {
    if (!state_) return;
    if (latency) state_->balancer.finished(i, *latency, now);
    else state_->balancer.ended(i);
  }
  /// A connection or request to `i` failed without an answer after `took`
  /// (balancer.hpp's failed: a costly sample).
  void failed(std::size_t i, duration_type took, TimePoint now) noexcept {
    if (state_) state_->balancer.failed(i, took, now);
  }
  double cost(std::size_t i, TimePoint now) const noexcept { return state_ ? state_->balancer.cost(i, now) : 0; }
  slot_load load(std::size_t i, TimePoint now) const noexcept {
    if (!state_ || i >= state_->balancer.size()) return {};
    return {state_->requests[i], state_->balancer.outstanding(i), state_->balancer.cost(i, now)};
  }

private:
  struct state {
    basic_balancer<TimePoint> balancer;
    std::array<std::uint64_t, max_balanced_addresses> requests{};
  };
  std::unique_ptr<state> state_;
};

} // namespace coretry::http::detail

#endif
