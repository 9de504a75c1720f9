#ifndef CORETRY_SRC_HTTP_ADDRESS_HEALTH_HPP
#define CORETRY_SRC_HTTP_ADDRESS_HEALTH_HPP

// How the addresses the client connects to are doing, decided in one place.
// Connections and attempts report what happened at an address (a connect
// that failed, a race another address won, an attempt that ended with a
// verdict); the rules here say whether that counts against the address, for
// it, or not at all. The record itself (runs of failures, ejections and
// returns, what a lookup gave) is the address book's (address_book.hpp),
// reached only through this object. Connections ask it what a lookup is
// needed for, which addresses a new connection tries and whether a pooled
// connection suits an attempt, given the addresses its operation already
// used (used_addresses, kept with the operation), and, for a name of
// several addresses, which one the next request goes to (the balancer,
// told of each request's start and end: in_flight_request). No I/O and no
// clock reads: the time is an argument. Thread-safe. Internal to
// coretry::http.

#include <coretry/http/addresses.hpp>
#include <coretry/http/exchange.hpp>
#include <coretry/verdict.hpp>

#include "address_book.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace coretry::http::detail {

using address_book = basic_address_book<std::chrono::steady_clock::time_point>;

/// The addresses an operation's attempts used, the latest last (at most
/// the latest `capacity`): a retry or a hedge prefers another address.
/// Attempts of one operation may run at once (hedges): guarded.
class used_addresses {
public:
  static constexpr std::size_t capacity = 8;
  using endpoint = boost::asio::ip::tcp::endpoint;

  used_addresses() = default;
  used_addresses(used_addresses&& other) noexcept : list_(other.list_), count_(other.count_) {}
  used_addresses& operator=(used_addresses&&) = delete;

  /// `at` becomes the latest.
  void add(const endpoint& at) {
    std::lock_guard lock(mutex_);
    const auto first = list_.begin();
    const auto last = first + static_cast<std::ptrdiff_t>(count_);
    if (const auto found = std::find(first, last, at); found != last) std::rotate(found, found + 1, last);
    else if (count_ < capacity) ++count_;
    else std::rotate(first, first + 1, last); // the oldest makes room
    list_[count_ - 1] = at;
  }

  /// Copies the list into `out`; its length.
  std::size_t copy(std::array<endpoint, capacity>& out) const {
    std::lock_guard lock(mutex_);
    std::copy_n(list_.begin(), count_, out.begin());
    return count_;
  }

private:
  mutable std::mutex mutex_;
  std::array<endpoint, capacity> list_{};
  std::size_t count_ = 0;
};

/// What an event says of the address it happened at.
enum class blame {
  none,    ///< nothing: not the address's doing, or nothing learnt
  failure, ///< one more failure in its run
  success, ///< its run of failures ends
};

/// Whether a connection's failure says something of the address (refused,
/// unreachable, reset, timed out), not of this machine (out of descriptors
/// or buffers) or of the caller (cancelled).
bool address_failed(const boost::system::error_code& ec) noexcept;

/// What became of one address's connection, as a connect or a race that
/// tried it reports it. Durations rather than instants: the rule reads no
/// clock and needs none.
struct connect_report {
  boost::asio::ip::tcp::endpoint at;
  /// Its own failure; empty when it connected, or was stopped (a race
  /// another address won, or the caller's cancellation).
  boost::system::error_code error;
  /// Still trying when another address won the race.
  bool outrun = false;
  /// How long it had been trying when the race ended.
  duration tried{};
  /// How long the winner had been trying when the race ended.
  duration winner_tried{};
};

/// The connect rule: a failure address_failed counts, or an address that a
/// later one outran: started before the winner and tried for at least
/// `attempt_delay` longer (client_options::connection_attempt_delay).
/// Nothing else (a connection made is no success until it answers).
blame connect_blame(const connect_report& r, duration attempt_delay) noexcept;

/// The attempt rule, for an attempt that went to an address: an answer
/// below 500 is a success; a 5xx the classifier took as transient
/// (`status`), an attempt that ran out of time, or a new connection that
/// the other end closed or reset before an answer (or the idle limit
/// ended) is a failure. A reused connection closed under the attempt is the
/// usual end of a kept-alive connection; an answer the client refused (too
/// large, malformed), a 501 or 505 taken as permanent, an attempt cancelled
/// for other reasons (a hedge that lost) say nothing. Through a proxy the
/// address is the proxy's and the answer the origin's: nothing (the proxy's
/// connection failures count when connecting).
blame attempt_blame(const boost::system::error_code& ec, const exchange& x, attempt_status status,
                    bool through_proxy) noexcept;

/// How long an attempt that got no answer (no response head) waited for
/// one: its write, first byte and read phases; none when an answer came.
/// An attempt the attempt rule blames and this gives a time for is the
/// balancer's costly sample (balancer.hpp's failed), as is a connect the
/// connect rule blames (with the time it tried).
std::optional<duration> unanswered_time(const exchange& x) noexcept;

/// The owner of the blame rules above and of the address book they feed.
class address_health {
public:
  using time_point = std::chrono::steady_clock::time_point;
  using endpoint = boost::asio::ip::tcp::endpoint;

  /// `attempt_delay`: client_options::connection_attempt_delay, which the
  /// connect rule measures an outrun address by.
  address_health(duration lookup_ttl, outlier_ejection ejection, duration attempt_delay,
                 balance_mode mode = balance_mode::least_cost)
      : book_(lookup_ttl, ejection, mode), attempt_delay_(attempt_delay) {}

  // What a name's addresses are.

  /// `n` always goes to `endpoints` and is never looked up.
  void pin(name_and_port n, std::vector<endpoint> endpoints) { book_.pin(n, std::move(endpoints)); }
  /// Whether `n` needs a lookup before a new connection (address_book).
  bool needs_lookup(name_and_port n, time_point now) const { return book_.needs_lookup(n, now); }
  /// A lookup's answer for `n`.
  void store(name_and_port n, std::vector<endpoint> looked_up, time_point now) {
    book_.store(n, std::move(looked_up), now);
  }

  // Asked.

  /// The order a new connection to `n` tries its addresses in: `first`
  /// (pick's answer) first, `avoid` (the operation's used addresses, the
  /// latest last) and ejected ones last.
  std::vector<endpoint> order(name_and_port n, std::span<const endpoint> avoid, time_point now,
                              const std::optional<endpoint>& first = std::nullopt) {
    return book_.order(n, avoid, now, first);
  }
  /// The address the next request to `n` goes to, by the balancer; none
  /// for a name of one address or in first_to_connect mode (address_book).
  std::optional<endpoint> pick(name_and_port n, std::span<const endpoint> avoid, time_point now) {
    return book_.pick(n, avoid, now);
  }
  /// The balancer's cost of `at` now (0 when `n` is not balanced).
  double cost(name_and_port n, const endpoint& at, time_point now) { return book_.cost(n, at, now); }
  /// Whether a pooled connection to `at` suits an attempt of an operation
  /// whose earlier attempts used `avoid`. Cheap for a healthy dependency.
  bool suits(name_and_port n, const endpoint& at, std::span<const endpoint> avoid, time_point now) {
    return book_.suits(n, at, avoid, now);
  }
  address_stats stats(time_point now) { return book_.stats(now); }

  // Reported.

  /// A new connection is raced over more than one address.
  void race_started() { book_.note_race(); }
  /// What became of a connection to one of `n`'s addresses.
  void connect_ended(name_and_port n, const connect_report& r, time_point now);
  /// An attempt that went to `at`, one of `n`'s addresses, ended with `ec`
  /// and `x`, classified as `status` (a failure without an answer is also
  /// the balancer's sample). `now()` gives the time; it is called
  /// only when a failure is recorded, so that an attempt that went well
  /// costs no clock read.
  template <class Now>
  void attempt_ended(name_and_port n, const endpoint& at, bool through_proxy, const boost::system::error_code& ec,
                     const exchange& x, attempt_status status, Now&& now) {
    switch (attempt_blame(ec, x, status, through_proxy)) {
    case blame::failure: book_.failed(n, at, now(), unanswered_time(x)); break;
    case blame::success: book_.succeeded(n, at); break;
    case blame::none: break;
    }
  }

  /// A request to `at` started (`again`: re-sent within its attempt, not
  /// counted among the address's requests a second time); true when the
  /// balancer counts it in flight (then request_ended must follow:
  /// in_flight_request does both).
  bool request_started(name_and_port n, const endpoint& at, bool again = false) {
    return book_.request_started(n, at, again);
  }
  /// A counted request ended, answered after `latency` or not at all.
  void request_ended(name_and_port n, const endpoint& at, std::optional<duration> latency, time_point now) {
    book_.request_ended(n, at, latency, now);
  }

private:
  address_book book_;
  duration attempt_delay_;
};

/// A request in flight to an address, as the balancer counts it: from
/// start() to answered() (its latency a sample) or to its end without an
/// answer (end(), or destruction). Costs nothing for a name that is not
/// balanced. `n`'s text must outlive it.
class in_flight_request {
public:
  using time_point = address_health::time_point;
  in_flight_request() = default;
  in_flight_request(const in_flight_request&) = delete;
  in_flight_request& operator=(const in_flight_request&) = delete;
  ~in_flight_request() { end(); }

  /// A request to `at` is sent at `now` (ending the one before, if any);
  /// `again`: the same request re-sent on a fresh connection.
  void start(address_health& health, name_and_port n, const address_health::endpoint& at, time_point now,
             bool again = false) {
    end();
    if (!health.request_started(n, at, again)) return;
    health_ = &health;
    name_ = n;
    at_ = at;
    sent_ = now;
  }
  /// Its response arrived whole at `now`.
  void answered(time_point now) { finish(now - sent_, now); }
  /// It ended without an answer.
  void end() { finish(std::nullopt, sent_); }

private:
  void finish(std::optional<duration> latency, time_point now) {
    if (address_health* h = std::exchange(health_, nullptr)) h->request_ended(name_, at_, latency, now);
  }
  address_health* health_ = nullptr;
  name_and_port name_;
  address_health::endpoint at_;
  time_point sent_{};
};

} // namespace coretry::http::detail

#endif
