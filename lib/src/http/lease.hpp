#ifndef CORETRY_SRC_HTTP_LEASE_HPP
#define CORETRY_SRC_HTTP_LEASE_HPP

// What an attempt holds of the connection pool (pool.hpp): a connection, or
// the permit to open one, given back when it goes. Internal to coretry::http.

#include <memory>
#include <string>
#include <utility>

namespace coretry::http::detail {

/// A leased connection or, with no connection, a permit to open one. Given
/// back on destruction: pooled when the exchange ended cleanly, else closed.
template <class Pool>
class basic_lease {
public:
  using connection_type = typename Pool::connection_type;
  using time_point = typename Pool::time_point;

  /// `key` is the pool's own copy of the origin's key, which stays while
  /// any lease of the origin does; `since` is when it was leased.
  basic_lease(Pool* pool, const std::string& key, std::unique_ptr<connection_type> conn, time_point since)
      : pool_(pool), key_(&key), conn_(std::move(conn)), since_(since) {}
  basic_lease(basic_lease&& other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)), key_(other.key_), conn_(std::move(other.conn_)),
        since_(other.since_), reusable_(other.reusable_) {}
  basic_lease& operator=(basic_lease&&) = delete;
  ~basic_lease() {
    if (pool_) pool_->give_back(*key_, std::move(conn_), reusable_, since_);
  }

  connection_type* get() const noexcept { return conn_.get(); }
  void attach(std::unique_ptr<connection_type> conn) { conn_ = std::move(conn); }
  void mark_reusable() noexcept { reusable_ = true; }

private:
  Pool* pool_;
  const std::string* key_; ///< the pool's key of the origin (no copy per lease)
  std::unique_ptr<connection_type> conn_;
  time_point since_; ///< when it was leased: how long its exchange held it
  bool reusable_ = false;
};

} // namespace coretry::http::detail

#endif
