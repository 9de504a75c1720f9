#ifndef CORETRY_SRC_HTTP_ADDRESS_BOOK_HPP
#define CORETRY_SRC_HTTP_ADDRESS_BOOK_HPP

// The record of the addresses of each name the client connects to: what a
// lookup (or a pin) gave, how long that stays good, each address's run of
// failures, which are ejected and until when, and in what order a new
// connection tries them. It is address_health's store (address_health.hpp),
// which alone tells it of failures and successes: what counts as one is
// decided there, what follows from a run of them (ejection, its length,
// the share never ejected, the return) here, under the same lock as the
// record, as is a name's balancer (address_balance.hpp: requests' starts
// and ends, the next request's address). No I/O and no clock reads: the
// time is an argument, so that the rules run on virtual time. Thread-safe.
// Internal to coretry::http.

#include <coretry/http/addresses.hpp>
#include <coretry/random.hpp>
#include <coretry/with_deadline.hpp>

#include "address_balance.hpp"
#include "address_names.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace coretry::http::detail {

template <class TimePoint>
class basic_address_book {
public:
  using endpoint = boost::asio::ip::tcp::endpoint;
  using name = name_and_port;

  /// `random`: the balancer's draws (the process's independent source
  /// unless a test gives its own); it must outlive the book.
  basic_address_book(duration lookup_ttl, outlier_ejection ejection, balance_mode mode = balance_mode::least_cost,
                     random_source& random = independent_random::instance())
      : lookup_ttl_(lookup_ttl), ejection_(ejection), mode_(mode), random_(&random) {}

  /// `name` ("host:port") always goes to `endpoints` and is never looked up.
  void pin(name n, std::vector<endpoint> endpoints) {
    std::lock_guard lock(mutex_);
    entry& e = entry_of(n);
    e.pinned = true;
    replace(e, std::move(endpoints), TimePoint{});
  }

  bool pinned(name n) const {
    std::lock_guard lock(mutex_);
    const auto it = names_.find(n);
    return it != names_.end() && it->second.pinned;
  }

  /// Whether `name` needs a lookup before a new connection: never looked up,
  /// looked up at least lookup_ttl ago, or every address failed at its last
  /// try (or is ejected) since. A pinned name never does.
  bool needs_lookup(name n, TimePoint now) const {
    std::lock_guard lock(mutex_);
    const auto it = names_.find(n);
    if (it == names_.end() || it->second.endpoints.empty()) return true;
    const entry& e = it->second;
    if (e.pinned) return false;
    if (now >= instant_after(e.looked_up_at, lookup_ttl_)) return true;
    return std::all_of(e.health.begin(), e.health.end(),
                       [&](const address_health& h) { return h.consecutive > 0 || h.ejected_until > now; });
  }

  /// A lookup's answer for `name`: addresses still there keep their record
  /// (ejections included); duplicates are dropped, and addresses beyond
  /// max_addresses_per_name.
  void store(name n, std::vector<endpoint> looked_up, TimePoint now) {
    std::lock_guard lock(mutex_);
    entry& e = entry_of(n);
    if (e.pinned) return;
    e.looked_up_at = now;
    replace(e, std::move(looked_up), now);
  }

  /// The order a new connection to `name` tries its addresses in: first
  /// those neither ejected nor in `avoid` (addresses this operation's earlier
  /// attempts used, the latest last), then the rest, ejected ones last;
  /// families interleaved within each group. When every address is in
  /// `avoid`, only the latest (the one that just failed) is put back.
  /// `first` (the balancer's pick), when listed and not ejected, goes
  /// before all: the others are the race that follows when it fails.
  std::vector<endpoint> order(name n, std::span<const endpoint> avoid, TimePoint now,
                              const std::optional<endpoint>& first = std::nullopt) {
    std::lock_guard lock(mutex_);
    const auto it = names_.find(n);
    if (it == names_.end()) return {};
    entry& e = it->second;
    expire(e, now);
    std::vector<endpoint> returning, good, rest, ejected;
    const auto avoided = avoid_rule(e, avoid);
    for (std::size_t i = 0; i < e.endpoints.size(); ++i) {
      address_health& h = e.health[i];
      if (h.ejected_until > now) {
        ejected.push_back(e.endpoints[i]);
      } else if (avoided(e.endpoints[i])) {
        rest.push_back(e.endpoints[i]);
      } else if (h.returning) {
        // Back from an ejection: this connection tries it first, once.
        returning.push_back(e.endpoints[i]);
        end_return(h);
      } else {
        good.push_back(e.endpoints[i]);
      }
    }
    std::vector<endpoint> out = interleave_families(returning);
    for (const auto& x : interleave_families(good)) out.push_back(x);
    for (const auto* group : {&rest, &ejected})
      for (const auto& x : interleave_families(*group)) out.push_back(x);
    if (first) {
      const auto not_ejected = out.end() - static_cast<std::ptrdiff_t>(ejected.size());
      if (const auto picked = std::find(out.begin(), not_ejected, *first); picked != not_ejected)
        std::rotate(out.begin(), picked, picked + 1);
    }
    return out;
  }

  /// Whether a pooled connection to `at` suits an attempt of an operation
  /// whose earlier attempts used `avoid`: not ejected, and not avoided when
  /// another address of `name` is neither. Cheap when nothing is avoided and
  /// nothing is ejected (every attempt of a healthy dependency).
  bool suits(name n, const endpoint& at, std::span<const endpoint> avoid, TimePoint now) {
    const auto nothing_special = [&] {
      return avoid.empty() && ejected_now_.load(std::memory_order_relaxed) == 0 &&
             returning_now_.load(std::memory_order_relaxed) == 0;
    };
    if (nothing_special()) return true;
    std::lock_guard lock(mutex_);
    if (now >= next_return_) expire_all(now); // an ejection on a name nobody uses any more ends too
    if (nothing_special()) return true;
    const auto it = names_.find(n);
    if (it == names_.end()) return true;
    entry& e = it->second;
    expire(e, now);
    const auto position = std::find(e.endpoints.begin(), e.endpoints.end(), at);
    if (position == e.endpoints.end()) return true; // no longer listed: still a connection
    const std::size_t index = static_cast<std::size_t>(position - e.endpoints.begin());
    if (e.health[index].ejected_until > now) {
      // Only when every address is ejected (not by this book's rule, but a
      // lookup can shrink the list) is an ejected one used.
      return std::all_of(e.health.begin(), e.health.end(), [&](const address_health& h) { return h.ejected_until > now; });
    }
    const auto avoided = avoid_rule(e, avoid);
    if (avoided(at)) return false;
    // An address back from an ejection gets a new connection (so that it is
    // tried again at all: the pooled ones go elsewhere): until one is made,
    // a pooled connection to another address does not suit.
    for (std::size_t i = 0; i < e.endpoints.size(); ++i)
      if (e.health[i].returning && i != index && !avoided(e.endpoints[i])) return false;
    return true;
  }

  /// A failure at `at`, as address_health judged one (connect_blame,
  /// attempt_blame). Ejects it after outlier_ejection::consecutive_failures.
  /// `unanswered`: no answer came, after that long (the balancer's sample).
  void failed(name n, const endpoint& at, TimePoint now, std::optional<typename TimePoint::duration> unanswered = {}) {
    std::lock_guard lock(mutex_);
    const auto it = names_.find(n);
    if (it == names_.end()) return;
    entry& e = it->second;
    expire(e, now);
    const std::size_t slot = slot_of(e, at);
    if (slot == e.endpoints.size()) return;
    if (unanswered) e.balance.failed(slot, *unanswered, now);
    address_health& h = e.health[slot];
    if (h.ejected_until > now) return; // its time out is already running
    ++h.consecutive;
    if (ejection_.consecutive_failures == 0 || h.consecutive < ejection_.consecutive_failures) return;
    if (ejected_count(e, now) + 1 > ejection_allowance(e.endpoints.size())) return;
    ++h.ejections;
    // base × ejections, at most the maximum (no overflow on the way).
    const duration base = ejection_.base_ejection_time;
    const duration most = ejection_.max_ejection_time;
    const auto times = static_cast<duration::rep>(std::min<std::uint64_t>(h.ejections, 1u << 20));
    const duration time_out = base.count() > 0 && base > most / times ? most : std::min(base * times, most);
    h.ejected_until = instant_after(now, time_out);
    h.consecutive = 0;
    end_return(h);
    next_return_ = std::min(next_return_, h.ejected_until);
    ++ejections_;
    ++ejected_now_;
  }

  /// A success at `at`, as address_health judged one: its run of failures
  /// ends.
  void succeeded(name n, const endpoint& at) {
    std::lock_guard lock(mutex_);
    const auto it = names_.find(n);
    if (it == names_.end()) return;
    entry& e = it->second;
    if (const std::size_t i = slot_of(e, at); i < e.endpoints.size()) e.health[i].consecutive = 0;
  }

  address_stats stats(TimePoint now) {
    std::lock_guard lock(mutex_);
    address_stats s;
    expire_all(now);
    s.ejections = ejections_;
    s.ejected = ejected_now_.load(std::memory_order_relaxed);
    s.connect_races = races_;
    for (const auto& [k, e] : names_) {
      if (!e.balance) continue;
      for (std::size_t i = 0; i < std::min(e.endpoints.size(), max_balanced_addresses); ++i) {
        const slot_load load = e.balance.load(i, now);
        s.spread.push_back({k.host + ":" + k.port, e.endpoints[i], load.requests, load.outstanding, load.cost,
                            e.health[i].ejected_until > now});
      }
    }
    return s;
  }

  // The balancer of a name of several addresses (address_balance.hpp).

  /// The address the next request to `n` goes to: one back from an
  /// ejection until tried (by a new connection, order(), or a request;
  /// meanwhile suits() turns down the others' pooled connections, so a
  /// full pool makes room), else the balancer's pick among those not
  /// ejected, `avoid`ed ones (avoid_rule) left out while another is left.
  /// None when `n` is not balanced (one address, first_to_connect, not in
  /// the book): no lock taken while no name is.
  std::optional<endpoint> pick(name n, std::span<const endpoint> avoid, TimePoint now) {
    if (balanced_names_.load(std::memory_order_relaxed) == 0) return std::nullopt;
    std::lock_guard lock(mutex_);
    const auto it = names_.find(n);
    if (it == names_.end() || !it->second.balance) return std::nullopt;
    entry& e = it->second;
    expire(e, now);
    const auto avoided = avoid_rule(e, avoid);
    address_set candidates = 0;
    address_set left_out = 0;
    for (std::size_t i = 0; i < std::min(e.endpoints.size(), max_balanced_addresses); ++i) {
      if (e.health[i].ejected_until > now) continue;
      const bool out = avoided(e.endpoints[i]);
      if (e.health[i].returning && !out) return e.endpoints[i];
      candidates |= address_set{1} << i;
      if (out) left_out |= address_set{1} << i;
    }
    const auto slot = e.balance.pick(candidates, left_out, now, *random_);
    return slot ? std::optional<endpoint>(e.endpoints[*slot]) : std::nullopt;
  }

  /// A request to `at`, one of `n`'s addresses, started: counted in flight
  /// when `n` is balanced (true; then request_ended must follow), and among
  /// its requests unless `again` (the same request re-sent in its attempt).
  bool request_started(name n, const endpoint& at, bool again = false) {
    if (balanced_names_.load(std::memory_order_relaxed) == 0) return false;
    std::lock_guard lock(mutex_);
    const auto it = names_.find(n);
    if (it == names_.end() || !it->second.balance) return false;
    const std::size_t i = slot_of(it->second, at);
    if (i < it->second.health.size()) end_return(it->second.health[i]); // tried, as by order()
    return it->second.balance.started(i, again);
  }

  /// A request counted by request_started ended: answered after `latency`
  /// (the balancer's sample), or without an answer.
  void request_ended(name n, const endpoint& at, std::optional<typename TimePoint::duration> latency, TimePoint now) {
    std::lock_guard lock(mutex_);
    const auto it = names_.find(n);
    if (it == names_.end()) return;
    if (const std::size_t i = slot_of(it->second, at); i < it->second.endpoints.size())
      it->second.balance.ended(i, latency, now);
  }

  /// The balancer's cost of `at` now; 0 when `n` is not balanced.
  double cost(name n, const endpoint& at, TimePoint now) {
    if (balanced_names_.load(std::memory_order_relaxed) == 0) return 0;
    std::lock_guard lock(mutex_);
    const auto it = names_.find(n);
    return it == names_.end() ? 0 : it->second.balance.cost(slot_of(it->second, at), now);
  }

  /// A new connection was raced over more than one address.
  void note_race() {
    std::lock_guard lock(mutex_);
    ++races_;
  }

  /// How many of a name's `n` addresses may be ejected at once.
  std::size_t ejection_allowance(std::size_t n) const noexcept {
    if (n < 2) return 0;
    const std::size_t share = n * std::min(ejection_.max_ejection_percent, 100u) / 100;
    return std::min(std::max<std::size_t>(share, 1), n - 1);
  }

private:
  struct address_health {
    unsigned consecutive = 0;
    std::uint64_t ejections = 0;
    TimePoint ejected_until{};
    /// Back from an ejection, and no new connection has tried it yet.
    bool returning = false;
  };
  struct entry {
    std::vector<endpoint> endpoints;
    std::vector<address_health> health;
    TimePoint looked_up_at{};
    bool pinned = false;
    name_balance<TimePoint> balance;
  };

  /// `h` is no longer back from an ejection: tried, or ejected again.
  void end_return(address_health& h) noexcept { returning_now_ -= std::exchange(h.returning, false) ? 1 : 0; }

  /// `at`'s position in `e`'s list (its balancer's slot); past the end if none.
  static std::size_t slot_of(const entry& e, const endpoint& at) {
    return static_cast<std::size_t>(std::find(e.endpoints.begin(), e.endpoints.end(), at) - e.endpoints.begin());
  }

  void replace(entry& e, std::vector<endpoint> endpoints, TimePoint now) {
    std::vector<endpoint> kept;
    std::vector<address_health> records;
    for (const auto& x : endpoints) {
      if (kept.size() == max_addresses_per_name) break;
      if (std::find(kept.begin(), kept.end(), x) != kept.end()) continue;
      const auto before = std::find(e.endpoints.begin(), e.endpoints.end(), x);
      records.push_back(before == e.endpoints.end() ? address_health{}
                                                    : e.health[static_cast<std::size_t>(before - e.endpoints.begin())]);
      kept.push_back(x);
    }
    // Ejections of addresses no longer listed end with them.
    for (std::size_t i = 0; i < e.endpoints.size(); ++i)
      if (std::find(kept.begin(), kept.end(), e.endpoints[i]) == kept.end()) {
        if (e.health[i].ejected_until != TimePoint{}) --ejected_now_;
        if (e.health[i].returning) --returning_now_;
      }
    balanced_names_.fetch_add(static_cast<std::size_t>(e.balance.relist(mode_, e.endpoints, kept, now)),
                              std::memory_order_relaxed); // -1 wraps to a decrement
    e.endpoints = std::move(kept);
    e.health = std::move(records);
  }

  /// Ends the ejections whose time is up: the address is back, its run of
  /// failures cleared (its count of ejections kept, so a relapse is ejected
  /// for longer).
  /// Its balancer starts it slow.
  void expire(entry& e, TimePoint now) {
    for (std::size_t i = 0; i < e.health.size(); ++i) {
      address_health& h = e.health[i];
      if (h.ejected_until != TimePoint{} && h.ejected_until <= now) {
        h.ejected_until = TimePoint{};
        h.consecutive = 0;
        --ejected_now_;
        if (!h.returning) ++returning_now_;
        h.returning = true;
        e.balance.returned(i, now);
      }
    }
  }

  /// expire() for every name; next_return_ becomes the earliest return left.
  void expire_all(TimePoint now) {
    next_return_ = TimePoint::max();
    for (auto& [k, e] : names_) {
      expire(e, now);
      for (const address_health& h : e.health)
        if (h.ejected_until != TimePoint{}) next_return_ = std::min(next_return_, h.ejected_until);
    }
  }

  static std::size_t ejected_count(const entry& e, TimePoint now) {
    return static_cast<std::size_t>(
        std::count_if(e.health.begin(), e.health.end(), [&](const address_health& h) { return h.ejected_until > now; }));
  }

  /// What `avoid` rules out for `e`: every address in it, unless that leaves
  /// no address that is not ejected; then only its latest one, unless that
  /// too leaves none; then nothing.
  auto avoid_rule(const entry& e, std::span<const endpoint> avoid) const {
    struct rule {
      std::span<const endpoint> avoided;
      bool operator()(const endpoint& x) const {
        return std::find(avoided.begin(), avoided.end(), x) != avoided.end();
      }
    };
    if (avoid.empty()) return rule{};
    const auto left = [&](std::span<const endpoint> out) {
      for (std::size_t i = 0; i < e.endpoints.size(); ++i)
        if (e.health[i].ejected_until == TimePoint{} &&
            std::find(out.begin(), out.end(), e.endpoints[i]) == out.end())
          return true;
      return false;
    };
    if (left(avoid)) return rule{avoid};
    if (left(avoid.last(1))) return rule{avoid.last(1)};
    return rule{};
  }

  using key = name_key;
  using key_less = name_key_less;

  entry& entry_of(name n) {
    auto it = names_.find(n);
    if (it != names_.end()) return it->second;
    if (names_.size() >= max_names) {
      // A client that talks to many hosts (URLs from outside) must not keep
      // them all: the name looked up longest ago goes (never a pin), with
      // whatever it knew.
      auto oldest = names_.end();
      for (auto candidate = names_.begin(); candidate != names_.end(); ++candidate)
        if (!candidate->second.pinned &&
            (oldest == names_.end() || candidate->second.looked_up_at < oldest->second.looked_up_at))
          oldest = candidate;
      if (oldest != names_.end()) {
        for (const address_health& h : oldest->second.health) {
          if (h.ejected_until != TimePoint{}) --ejected_now_;
          if (h.returning) --returning_now_;
        }
        if (oldest->second.balance) --balanced_names_;
        names_.erase(oldest);
      }
    }
    return names_.emplace(key{std::string(n.host), std::string(n.port)}, entry{}).first->second;
  }

  mutable std::mutex mutex_;
  std::map<key, entry, key_less> names_;
  duration lookup_ttl_;
  outlier_ejection ejection_;
  balance_mode mode_;
  random_source* random_;
  std::uint64_t ejections_ = 0;
  std::uint64_t races_ = 0;
  TimePoint next_return_ = TimePoint::max(); ///< no ejection ends before

  /// Read without the lock for the common case (nothing ejected).
  std::atomic<std::size_t> ejected_now_{0};
  /// Addresses back from an ejection that no new connection has tried yet.
  std::atomic<std::size_t> returning_now_{0};
  /// Names with a balancer: none, and no request takes the lock for one.
  std::atomic<std::size_t> balanced_names_{0};
};

} // namespace coretry::http::detail

#endif
