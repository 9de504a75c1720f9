#ifndef CORETRY_SRC_HTTP_POOL_HPP
#define CORETRY_SRC_HTTP_POOL_HPP

// The client's connection pool: per origin, idle connections for reuse, a
// bound on connections (leased plus idle), attempts waiting (woken in order) for one
// to be given back, and the closing of connections idle for too long.
// Generic over the connection (anything with is_stale() and close()) and the
// clock, so that it can be driven without sockets and on virtual time.
// Internal to coretry::http.

#include <coretry/detail/erase_handler.hpp>
#include <coretry/detail/operation_executor.hpp>
#include <coretry/http/client.hpp>
#include <coretry/with_deadline.hpp>

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

template <class Connection, class Clock>
class basic_connection_pool;

/// A leased connection or, with no connection, a permit to open one. Given
/// back on destruction: pooled when the exchange ended cleanly, else closed.
template <class Pool>
class basic_lease {
public:
  using connection_type = typename Pool::connection_type;

  /// `key` is the pool's own copy of the origin's key, which stays while
  /// any lease of the origin does.
  basic_lease(Pool* pool, const std::string& key, std::unique_ptr<connection_type> conn)
      : pool_(pool), key_(&key), conn_(std::move(conn)) {}
  basic_lease(basic_lease&& other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)), key_(other.key_), conn_(std::move(other.conn_)),
        reusable_(other.reusable_) {}
  basic_lease& operator=(basic_lease&&) = delete;
  ~basic_lease() {
    if (pool_) pool_->give_back(*key_, std::move(conn_), reusable_);
  }

  connection_type* get() const noexcept { return conn_.get(); }
  void attach(std::unique_ptr<connection_type> conn) { conn_ = std::move(conn); }
  void mark_reusable() noexcept { reusable_ = true; }

private:
  Pool* pool_;
  const std::string* key_; ///< the pool's key of the origin (no copy per lease)
  std::unique_ptr<connection_type> conn_;
  bool reusable_ = false;
};

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
    std::lock_guard lock(mutex_);
    // The origin's entry (and its key, which leases refer to) stays while it
    // has a lease.
    const auto entry_of_origin = origins_.try_emplace(key).first;
    const std::string& pooled_key = entry_of_origin->first;
    per_origin& o = entry_of_origin->second;
    const time_point now = now_();
    // Newest first; those that do not suit are put back as they were.
    std::size_t unsuited = 0;
    for (std::size_t i = o.idle.size(); i-- > 0;) {
      idle_entry& entry = o.idle[i];
      if (now - entry.since > idle_timeout_ || entry.conn->is_stale()) {
        ++stale_discarded_;
        entry.conn->close();
        o.idle.erase(o.idle.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      if (!suits(static_cast<const Connection&>(*entry.conn))) {
        ++unsuited;
        continue;
      }
      std::unique_ptr<Connection> conn = std::move(entry.conn);
      o.idle.erase(o.idle.begin() + static_cast<std::ptrdiff_t>(i));
      ++o.leased;
      return lease(this, pooled_key, std::move(conn));
    }
    if (o.leased + o.idle.size() >= max_per_origin_ && unsuited > 0) {
      o.idle.front().conn->close(); // the oldest of those left: all unsuited
      o.idle.erase(o.idle.begin());
    }
    if (o.leased + o.idle.size() < max_per_origin_) {
      ++o.leased;
      return lease(this, pooled_key, nullptr);
    }
    return std::nullopt;
  }

  /// Waits until a connection of `key` is given back (then try_lease again).
  /// Waiters are woken in the order they came; a woken waiter then competes
  /// with new callers of try_lease for the freed place (no place is held
  /// for it). Completion: void(error_code),
  /// posted to the pool's executor; operation_aborted when the waiter's own
  /// cancellation (of any type) came first. A waiter still waiting when the
  /// pool's execution context shuts down is destroyed unrun then.
  template <class Token>
  auto async_wait_for_release(const std::string& key, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [this, key](auto handler) {
          add_waiter(key, coretry::detail::erase_handler<void(boost::system::error_code)>(std::move(handler)));
        },
        token);
  }

  /// Called by a lease on destruction: the connection (if any) is kept idle
  /// when `reusable`, else closed; the first waiter of the origin is woken.
  /// `key` may be the pool's own key, which the expiry sweep may erase: it is
  /// not used after that.
  void give_back(const std::string& key, std::unique_ptr<Connection> conn, bool reusable) {
    typename waiter_queue::node_type woken;
    {
      std::lock_guard lock(mutex_);
      per_origin& o = origins_[key];
      --o.leased;
      const time_point now = now_();
      if (conn && reusable) {
        o.idle.push_back(idle_entry{std::move(conn), now});
      } else if (conn) {
        conn->close();
      }
      if (!o.waiters.empty()) woken = o.waiters.extract(o.waiters.begin()); // the oldest
      close_expired(now);
    }
    if (woken) boost::asio::post(executor_, boost::asio::append(std::move(woken.mapped()), boost::system::error_code{}));
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
  /// Waiters by id: ids only grow, so the first is the oldest, and one
  /// that is cancelled is found in log(n) (a queue thousands long is when
  /// cancellations come thickest, and the lock is held while looking).
  /// Handlers are moved in and out by construction only: Boost 1.81's
  /// any_completion_handler move assignment re-wraps the handler in itself.
  using waiter_queue = std::map<std::uint64_t, wait_handler>;

  struct idle_entry {
    std::unique_ptr<Connection> conn;
    time_point since;
  };

  struct per_origin {
    std::vector<idle_entry> idle;
    std::size_t leased = 0;
    waiter_queue waiters;
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
    for (auto& [key, o] : origins_) {
      for (auto& [id, handler] : o.waiters) out.push_back(std::move(handler));
      o.waiters.clear();
    }
  }

  void add_waiter(const std::string& key, wait_handler handler) {
    // The waiter's cancellation slot belongs to its own operation's strand: it
    // is assigned here, from that strand, and never touched from another
    // thread. A release wakes a waiter by posting its handler only; the slot's
    // handler finds waiters by id, so a stale one cancels nothing.
    boost::asio::cancellation_slot slot = handler.get_cancellation_slot();
    std::optional<wait_handler> dropped; // destroyed after the lock is let go
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
    const std::uint64_t id = next_waiter_id_++;
    o.waiters.try_emplace(o.waiters.end(), id, std::move(handler));
    if (slot.is_connected()) {
      slot.assign([this, key, id](boost::asio::cancellation_type) {
        typename waiter_queue::node_type cancelled;
        {
          std::lock_guard inner(mutex_);
          if (const auto o = origins_.find(key); o != origins_.end()) cancelled = o->second.waiters.extract(id);
        }
        if (cancelled)
          boost::asio::post(executor_, boost::asio::append(std::move(cancelled.mapped()),
                                                           boost::system::error_code(boost::asio::error::operation_aborted)));
      });
    }
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
