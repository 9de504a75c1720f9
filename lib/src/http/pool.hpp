#ifndef CORETRY_SRC_HTTP_POOL_HPP
#define CORETRY_SRC_HTTP_POOL_HPP

// The client's connection pool: per origin, idle connections for reuse, a
// bound on connections (leased plus idle), attempts waiting for one to be
// given back (woken in order while the queue is short-lived, the one with the
// most time left once the oldest is about to give up; refused at once when
// their time left cannot fit an exchange), and the closing of connections
// idle for too long. A lease is lease.hpp's; the queue of one origin's
// waiters and its exchange estimate, origin_waiters.hpp's.
// Generic over the connection (anything with is_stale() and close()) and the
// clock, so that it can be driven without sockets and on virtual time.
// Internal to coretry::http.

#include <coretry/detail/erase_handler.hpp>
#include <coretry/detail/operation_executor.hpp>
#include <coretry/http/client_stats.hpp>
#include <coretry/http/exchange.hpp>
#include <coretry/with_deadline.hpp>

#include "lease.hpp"
#include "origin_waiters.hpp"
#include "waiter_registry.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace coretry::http::detail {

/// `Connection` needs `bool is_stale()` (closed by the peer or holding bytes
/// nobody asked for; looked at before reuse) and `void close()`. `Clock`
/// gives the idle times; its current time is read through `now`, so that a
/// clock whose time lives elsewhere (virtual time) can be used.
template <class Connection, class Clock = std::chrono::steady_clock>
class basic_connection_pool final : waiter_holder {
public:
  using connection_type = Connection;
  using time_point = typename Clock::time_point;
  using lease = basic_lease<basic_connection_pool>;

  basic_connection_pool(boost::asio::any_io_executor ex, std::size_t max_per_origin, duration idle_timeout,
                        std::function<time_point()> now = [] { return Clock::now(); })
      : executor_(std::move(ex)), max_per_origin_(max_per_origin), idle_timeout_(idle_timeout), now_(std::move(now)),
        registry_(&boost::asio::use_service<waiter_registry>(coretry::detail::context_of(executor_))) {
    if (!registry_->add(this)) {
      registry_ = nullptr;
      shut_down_ = true;
    }
  }

  basic_connection_pool(const basic_connection_pool&) = delete;
  basic_connection_pool& operator=(const basic_connection_pool&) = delete;

  ~basic_connection_pool() {
    waiter_registry* registry = nullptr;
    {
      std::lock_guard lock(mutex_);
      registry = registry_;
    }
    if (registry) registry->remove(this);
    std::lock_guard lock(mutex_);
    for (auto& [key, o] : origins_)
      for (auto& entry : o.idle) entry.conn->close();
  }

  /// A lease now, if a connection or a permit is free. An idle connection is
  /// looked at before it is handed out (one system call): one the server
  /// closed, or that holds bytes nobody asked for, is closed instead; so is
  /// one idle for longer than the idle timeout. The most recently returned
  /// connection is reused first.
  std::optional<lease> try_lease(const std::string& key) {
    return try_lease(key, [](const Connection&) { return true; });
  }

  /// As try_lease(key), preferring idle connections `suits` accepts (for
  /// one to another address than an attempt before used). When none does,
  /// a permit is given if there is room; when there is none, the oldest
  /// idle connection that does not suit is closed to make room. Only when
  /// there are none either does the caller wait.
  template <class Suits>
  std::optional<lease> try_lease(const std::string& key, Suits&& suits) {
    return try_lease(key, std::forward<Suits>(suits), no_preference{});
  }

  /// As try_lease(key, suits), for an origin whose connections are spread
  /// over addresses: an idle connection that suits and that `spread`
  /// prefers (`spread.preferred(c)`: to the balancer's pick) is taken
  /// first; with none, a permit while there is room (a new connection, to
  /// the pick), else the one that suits whose address `spread.cost(c)`
  /// ranks lowest (the newest of equals): the balancer's next choice among
  /// what is there. At the limit with none that suits, the one
  /// `spread.cost(c)` ranks highest (the oldest of equals) is closed to
  /// make room. `spread.active` false: try_lease(key, suits).
  template <class Suits, class Spread>
  std::optional<lease> try_lease(const std::string& key, Suits&& suits, Spread&& spread) {
    std::lock_guard lock(mutex_);
    // The origin's entry (and its key, which leases refer to) stays while it
    // has a lease.
    const auto entry_of_origin = origins_.try_emplace(key).first;
    const std::string& pooled_key = entry_of_origin->first;
    per_origin& o = entry_of_origin->second;
    const time_point now = now_();
    const auto take = [&](std::size_t i) {
      std::unique_ptr<Connection> conn = std::move(o.idle[i].conn);
      o.idle.erase(o.idle.begin() + static_cast<std::ptrdiff_t>(i));
      ++o.leased;
      return lease(this, pooled_key, std::move(conn), now);
    };
    // Newest first; those that do not suit are put back as they were.
    std::size_t unsuited = 0;
    bool suited = false; // when spread: one that suits, not to the pick
    for (std::size_t i = o.idle.size(); i-- > 0;) {
      idle_entry& entry = o.idle[i];
      if (now - entry.since > idle_timeout_ || entry.conn->is_stale()) {
        ++stale_discarded_;
        entry.conn->close();
        o.idle.erase(o.idle.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      const Connection& c = *entry.conn;
      if (!suits(c)) {
        ++unsuited;
        continue;
      }
      if (!spread.active || spread.preferred(c)) return take(i);
      suited = true;
    }
    const bool room = o.leased + o.idle.size() < max_per_origin_;
    if (suited && !room) {
      // The cheapest that suits (costs asked only here, at the limit).
      std::optional<std::size_t> cheapest;
      double lowest = 0;
      for (std::size_t i = o.idle.size(); i-- > 0;) {
        const Connection& c = *o.idle[i].conn;
        if (!suits(c)) continue;
        if (const double cost = spread.cost(c); !cheapest || cost < lowest) {
          cheapest = i;
          lowest = cost;
        }
      }
      if (cheapest) return take(*cheapest);
    }
    if (!room && unsuited > 0) {
      // All left are unsuited: the costliest goes (the oldest of equals).
      std::size_t out = 0;
      if (spread.active) {
        double highest = spread.cost(static_cast<const Connection&>(*o.idle[0].conn));
        for (std::size_t i = 1; i < o.idle.size(); ++i)
          if (const double c = spread.cost(static_cast<const Connection&>(*o.idle[i].conn)); c > highest) {
            highest = c;
            out = i;
          }
      }
      o.idle[out].conn->close();
      o.idle.erase(o.idle.begin() + static_cast<std::ptrdiff_t>(out));
    }
    if (o.leased + o.idle.size() < max_per_origin_) {
      ++o.leased;
      return lease(this, pooled_key, nullptr, now);
    }
    return std::nullopt;
  }

  /// Waits until a connection of `key` is given back (then try_lease
  /// again), for an attempt that ends at `deadline`. Completion:
  /// void(error_code), posted to the pool's executor:
  /// - success: a connection was given back and this waiter chosen; it then
  ///   competes with new callers of try_lease for the freed place (no place
  ///   is held for it);
  /// - pool_error::too_late: less time is left before `deadline` than the
  ///   origin's exchanges lately take (exchange_estimate): refused when it
  ///   asks, or when the pool next looks at the queue (a connection given
  ///   back, another waiter coming), rather than handed a connection it
  ///   would most likely give up on mid-way;
  /// - operation_aborted: the waiter's own cancellation (of any type) came
  ///   first.
  /// A freed connection wakes the oldest waiter, unless that one has less
  /// than two exchanges' time left (it is about to give up: the queue is not
  /// worked off in time); then the waiter with the most time left. A waiter
  /// still waiting when the pool's execution context shuts down is
  /// destroyed unrun then.
  template <class Token>
  auto async_wait_for_release(const std::string& key, time_point deadline, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [this, key, deadline](auto handler) {
          add_waiter(key, deadline,
                     coretry::detail::erase_handler<void(boost::system::error_code)>(std::move(handler)));
        },
        token);
  }

  /// As above, for a waiter without a deadline.
  template <class Token>
  auto async_wait_for_release(const std::string& key, Token&& token) {
    return async_wait_for_release(key, time_point::max(), std::forward<Token>(token));
  }

  /// Called by a lease on destruction: the connection (if any) is kept idle
  /// when `reusable`, else closed; how long it was held (from `since`) goes
  /// into the origin's exchange estimate; waiters that can no longer fit an
  /// exchange are refused, and the next one is woken. `key` may be the
  /// pool's own key, which the expiry sweep may erase: it is not used after
  /// that.
  void give_back(const std::string& key, std::unique_ptr<Connection> conn, bool reusable, time_point since) {
    std::optional<wait_handler> woken;
    std::vector<wait_handler> refused; // allocates only when there are some
    {
      std::lock_guard lock(mutex_);
      per_origin& o = origins_[key];
      --o.leased;
      const time_point now = now_();
      o.waiters.note_exchange(now - since);
      if (conn && reusable) {
        o.idle.push_back(idle_entry{std::move(conn), now});
      } else if (conn) {
        conn->close();
      }
      o.waiters.refuse_too_late(now, refused);
      if (!o.waiters.empty()) woken.emplace(o.waiters.take_next(now));
      close_expired(now);
    }
    for (auto& late : refused)
      boost::asio::post(executor_, boost::asio::append(std::move(late), make_error_code(pool_error::too_late)));
    if (woken) boost::asio::post(executor_, boost::asio::append(std::move(*woken), boost::system::error_code{}));
  }

  /// What an exchange on `key`'s connections lately takes: an exponentially
  /// weighted average (weight 1/8, as TCP's smoothed round-trip time) of how
  /// long each lease was held, from the lease to its return, whatever its
  /// end (one cut off by its attempt's deadline counts the time it held the
  /// connection, a floor of what it needed). Zero before the first return.
  duration exchange_estimate(const std::string& key) const {
    std::lock_guard lock(mutex_);
    const auto o = origins_.find(key);
    return o == origins_.end() ? duration::zero() : o->second.waiters.estimate();
  }

  void note_opened() {
    std::lock_guard lock(mutex_);
    ++opened_;
  }

  void note_lookup() {
    std::lock_guard lock(mutex_);
    ++lookups_;
  }

  /// A reused connection turned out to have been closed by the server.
  void note_stale() {
    std::lock_guard lock(mutex_);
    ++stale_discarded_;
  }

  pool_stats stats() const {
    std::lock_guard lock(mutex_);
    pool_stats s;
    for (const auto& [key, o] : origins_) {
      s.idle += o.idle.size();
      s.leased += o.leased;
      s.waiting += o.waiters.size();
    }
    s.open = s.idle + s.leased;
    s.connections_opened = opened_;
    s.stale_discarded = stale_discarded_;
    s.lookups = lookups_;
    return s;
  }

  /// Closes every idle connection now.
  void close_idle() {
    std::lock_guard lock(mutex_);
    for (auto& [key, o] : origins_) {
      for (auto& entry : o.idle) entry.conn->close();
      o.idle.clear();
    }
  }

  /// Origins the pool keeps state for (forgotten once they hold nothing).
  std::size_t origins() const {
    std::lock_guard lock(mutex_);
    return origins_.size();
  }

private:
  /// try_lease's spread for an origin that is not spread.
  struct no_preference {
    static constexpr bool active = false;
    bool preferred(const Connection&) const { return false; }
    double cost(const Connection&) const { return 0; }
  };

  struct idle_entry {
    std::unique_ptr<Connection> conn;
    time_point since;
  };

  struct per_origin {
    std::vector<idle_entry> idle;
    std::size_t leased = 0;
    origin_waiters<time_point> waiters;
  };

  /// At most once per idle timeout, closes the idle connections that are
  /// past it, whatever their origin, and forgets origins left with nothing:
  /// a client that talks to many hosts once each would otherwise keep their
  /// sockets (and the server's half-closed ends) forever. Called with the
  /// mutex held.
  void close_expired(time_point now) {
    if (now < next_expiry_sweep_) return;
    next_expiry_sweep_ = instant_after(now, idle_timeout_);
    for (auto it = origins_.begin(); it != origins_.end();) {
      std::erase_if(it->second.idle, [&](const idle_entry& entry) {
        if (now - entry.since <= idle_timeout_) return false;
        entry.conn->close();
        return true;
      });
      const per_origin& o = it->second;
      it = o.idle.empty() && o.leased == 0 && o.waiters.empty() ? origins_.erase(it) : std::next(it);
    }
  }

  void take_waiters_at_shutdown(std::vector<wait_handler>& out) override {
    std::lock_guard lock(mutex_);
    shut_down_ = true;
    registry_ = nullptr;
    for (auto& [key, o] : origins_) o.waiters.take_all(out);
  }

  void add_waiter(const std::string& key, time_point deadline, wait_handler handler) {
    // The waiter's cancellation slot belongs to its own operation's strand: it
    // is assigned here, from that strand, and never touched from another
    // thread. A release wakes a waiter by posting its handler only; the slot's
    // handler finds waiters by id, so a stale one cancels nothing.
    boost::asio::cancellation_slot slot = handler.get_cancellation_slot();
    std::optional<wait_handler> dropped; // destroyed after the lock is let go
    std::vector<wait_handler> refused;   // told too_late after the lock is let go
    {
      std::lock_guard lock(mutex_);
      if (shut_down_) {
        // The context has shut down: nothing would ever wake it.
        dropped.emplace(std::move(handler));
        return;
      }
      per_origin& o = origins_[key];
      if (o.leased + o.idle.size() < max_per_origin_ || !o.idle.empty()) {
        // Freed between try_lease and here: go round again at once.
        boost::asio::post(executor_, boost::asio::append(std::move(handler), boost::system::error_code{}));
        return;
      }
      const time_point now = now_();
      o.waiters.refuse_too_late(now, refused);
      if (!o.waiters.fits(deadline, now)) {
        refused.push_back(std::move(handler));
      } else {
        const std::uint64_t id = next_waiter_id_++;
        o.waiters.add(id, deadline, std::move(handler));
        if (slot.is_connected()) {
          slot.assign([this, key, id](boost::asio::cancellation_type) {
            std::optional<wait_handler> cancelled;
            {
              std::lock_guard inner(mutex_);
              if (const auto o = origins_.find(key); o != origins_.end()) o->second.waiters.cancel(id, cancelled);
            }
            if (cancelled)
              boost::asio::post(executor_,
                                boost::asio::append(std::move(*cancelled),
                                                    boost::system::error_code(boost::asio::error::operation_aborted)));
          });
        }
      }
    }
    for (auto& late : refused)
      boost::asio::post(executor_, boost::asio::append(std::move(late), make_error_code(pool_error::too_late)));
  }

  boost::asio::any_io_executor executor_;
  mutable std::mutex mutex_;
  std::map<std::string, per_origin> origins_;
  std::size_t max_per_origin_;
  duration idle_timeout_;
  std::function<time_point()> now_;
  std::uint64_t opened_ = 0;
  std::uint64_t stale_discarded_ = 0;
  std::uint64_t lookups_ = 0;
  std::uint64_t next_waiter_id_ = 1;
  time_point next_expiry_sweep_{};
  waiter_registry* registry_; ///< null once the context has shut down
  bool shut_down_ = false;    ///< the context has shut down: no waiter is kept
};

} // namespace coretry::http::detail

#endif
