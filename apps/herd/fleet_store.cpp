#include "herd/fleet_store.hpp"

#include <algorithm>

namespace herd {

fleet_store::reply fleet_store::exchange(coretry::duration now_d, const request& r) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  constexpr std::int64_t unit = 1'000'000;
  const std::int64_t now = duration_cast<milliseconds>(now_d).count();
  reply out;

  if (options_.budget) {
    const std::int64_t cap = options_.capacity_units;
    std::int64_t units = std::min(cap, std::max<std::int64_t>(0, units_.value_or(cap)) + r.deposit_units);
    const std::int64_t grant = std::max<std::int64_t>(0, std::min<std::int64_t>(r.want, units / unit));
    units -= grant * unit;
    units_ = units;
    out.granted = static_cast<unsigned>(grant);
    out.units_left = units;
  }

  // ZADD, then ZREMRANGEBYSCORE -inf (now - stale), then ZCARD.
  if (const auto [at, added] = seen_.try_emplace(r.process, now); !added) {
    by_time_.erase({at->second, r.process});
    at->second = now;
  }
  by_time_.emplace(now, r.process);
  const std::int64_t stale = duration_cast<milliseconds>(options_.stale).count();
  while (!by_time_.empty() && by_time_.begin()->first <= now - stale) {
    seen_.erase(by_time_.begin()->second);
    by_time_.erase(by_time_.begin());
  }
  out.live = static_cast<unsigned>(seen_.size());

  const std::int64_t width = duration_cast<milliseconds>(options_.gate_width).count();
  if (width > 0) {
    const auto n = static_cast<std::int64_t>(options_.gate_buckets);
    const std::int64_t epoch = now / width;
    if (r.forget)
      for (std::int64_t i = 0; i <= n; ++i) window_.erase(epoch - i);
    if (r.requests > 0) {
      bucket& b = window_[epoch];
      b.all.requests += r.requests;
      b.by_process[r.process].requests += r.requests;
      if (r.accepts > 0) {
        b.all.accepts += r.accepts;
        b.by_process[r.process].accepts += r.accepts;
      }
    }
    // Keys expire (n + 1) x width after their last write: never read again.
    std::erase_if(window_, [&](const auto& e) { return e.first < epoch - n; });
    std::int64_t pr = 0, pa = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto found = window_.find(epoch - i);
      if (found == window_.end()) continue;
      const bucket& b = found->second;
      counts own;
      if (const auto mine = b.by_process.find(r.process); mine != b.by_process.end()) own = mine->second;
      pr += static_cast<std::int64_t>(b.all.requests) - static_cast<std::int64_t>(own.requests);
      pa += static_cast<std::int64_t>(b.all.accepts) - static_cast<std::int64_t>(own.accepts);
    }
    out.peer_requests = static_cast<std::uint64_t>(std::max<std::int64_t>(0, pr));
    out.peer_accepts = static_cast<std::uint64_t>(std::max<std::int64_t>(0, pa));
  }
  return out;
}

} // namespace herd
