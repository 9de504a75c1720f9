#ifndef CORETRY_SRC_HTTP_ORIGIN_WAITERS_HPP
#define CORETRY_SRC_HTTP_ORIGIN_WAITERS_HPP

// The attempts waiting for a connection of one origin of the pool
// (pool.hpp), and what an exchange on its connections lately takes: which
// waiter a freed place goes to (the oldest while the queue is short-lived,
// the one with the most time left once the oldest is about to give up),
// which are refused because their time left cannot fit an exchange, and
// which one a cancellation takes out. No locking, no I/O and no clock reads:
// the pool holds its lock around every call and gives the time. Internal to
// coretry::http.

#include <coretry/with_deadline.hpp>

#include "waiter_registry.hpp"

#include <boost/multi_index/member.hpp>
#include <boost/multi_index/ordered_index.hpp>
#include <boost/multi_index/tag.hpp>
#include <boost/multi_index_container.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

namespace coretry::http::detail {

template <class TimePoint>
class origin_waiters {
public:
  using time_point = TimePoint;

  bool empty() const noexcept { return waiters_.empty(); }
  std::size_t size() const noexcept { return waiters_.size(); }

  /// An exponentially weighted average (weight 1/8, as TCP's smoothed
  /// round-trip time) of how long each lease was held; zero until the first
  /// lease came back.
  duration estimate() const noexcept { return estimate_; }

  /// A lease held for `held` came back.
  void note_exchange(duration held) {
    if (held < duration::zero()) held = duration::zero();
    if (!estimated_) {
      estimate_ = held; // the first sample alone, as TCP's first round trip
      estimated_ = true;
    } else {
      estimate_ += (held - estimate_) / 8;
    }
  }

  /// Whether a waiter due at `deadline` can still fit an exchange from `now`.
  bool fits(time_point deadline, time_point now) const { return deadline >= instant_after(now, estimate_); }

  /// A waiter `id` (ids only grow: the lowest is the oldest), due at `deadline`.
  void add(std::uint64_t id, time_point deadline, wait_handler handler) {
    waiters_.emplace_hint(waiters_.end(), id, deadline, std::move(handler));
  }

  /// Takes out waiter `id`, if it still waits, into `out`.
  void cancel(std::uint64_t id, std::optional<wait_handler>& out) {
    if (const auto w = waiters_.find(id); w != waiters_.end()) {
      out.emplace(std::move(w->handler));
      waiters_.erase(w);
    }
  }

  /// Takes out every waiter that can no longer fit an exchange (the earliest
  /// deadlines first), for their handlers to be told pool_error::too_late.
  void refuse_too_late(time_point now, std::vector<wait_handler>& out) {
    auto& by_time = waiters_.template get<by_deadline>();
    while (!by_time.empty() && !fits(by_time.begin()->deadline, now)) {
      out.emplace_back(std::move(by_time.begin()->handler));
      by_time.erase(by_time.begin());
    }
  }

  /// Takes out the waiter a freed place goes to (there is one, and all fit):
  /// the oldest while it has time for two exchanges; when it has less, it
  /// is about to give up and the queue is not worked off in time (a
  /// standing queue: overload), so the waiter with the most time left, the
  /// newest among equals.
  wait_handler take_next(time_point now) {
    const auto oldest = waiters_.begin();
    if (fits(oldest->deadline, instant_after(now, estimate_))) {
      wait_handler handler(std::move(oldest->handler));
      waiters_.erase(oldest);
      return handler;
    }
    auto& by_time = waiters_.template get<by_deadline>();
    const auto most_time = std::prev(by_time.end());
    wait_handler handler(std::move(most_time->handler));
    by_time.erase(most_time);
    return handler;
  }

  /// Takes out every waiter (the execution context shuts down).
  void take_all(std::vector<wait_handler>& out) {
    for (const waiter& w : waiters_) out.emplace_back(std::move(w.handler));
    waiters_.clear();
  }

private:
  /// A waiter: its handler, and when its attempt ends.
  struct waiter {
    waiter(std::uint64_t i, time_point d, wait_handler&& h) : id(i), deadline(d), handler(std::move(h)) {}
    std::uint64_t id;
    time_point deadline;
    /// Moved out (by construction only: Boost 1.81's any_completion_handler
    /// move assignment re-wraps the handler in itself) just before its
    /// element is erased; the keys are never touched.
    mutable wait_handler handler;
  };
  struct by_deadline {};

  /// Waiters, one node each, in two orders: by id (arrival) and by deadline
  /// (ties in arrival order). One that is cancelled is found in log(n) (a
  /// queue thousands long is when cancellations come thickest, and the lock
  /// is held while looking); the oldest, the next to become too late and
  /// the one with the most time left are at the ends.
  using waiter_queue = boost::multi_index_container<
      waiter,
      boost::multi_index::indexed_by<
          boost::multi_index::ordered_unique<boost::multi_index::member<waiter, std::uint64_t, &waiter::id>>,
          boost::multi_index::ordered_non_unique<boost::multi_index::tag<by_deadline>,
                                                 boost::multi_index::member<waiter, time_point, &waiter::deadline>>>>;

  waiter_queue waiters_;
  duration estimate_ = duration::zero();
  bool estimated_ = false;
};

} // namespace coretry::http::detail

#endif
