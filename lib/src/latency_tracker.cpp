#include <coretry/latency_tracker.hpp>
#include <coretry/stop_reason.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>
#include <string>

namespace coretry {

namespace {

constexpr std::uint64_t exact_below = 2 * latency_tracker::sub_buckets; // 128 ns
constexpr unsigned sub_bits = 6;                                       // log2(sub_buckets)
static_assert(latency_tracker::sub_buckets == 1u << sub_bits);
static_assert(latency_tracker::bucket_count ==
              latency_tracker::sub_buckets * (40 - sub_bits) + latency_tracker::sub_buckets);

std::size_t bucket_of(duration d) noexcept {
  const auto v = static_cast<std::uint64_t>(std::clamp(d, duration::zero(), latency_tracker::longest).count());
  if (v < exact_below) return static_cast<std::size_t>(v);
  const unsigned shift = static_cast<unsigned>(std::bit_width(v)) - 1 - sub_bits;
  return latency_tracker::sub_buckets * shift + static_cast<std::size_t>(v >> shift);
}

duration edge_of(std::size_t bucket) noexcept {
  if (bucket < exact_below) return duration(static_cast<duration::rep>(bucket));
  const std::size_t shift = bucket / latency_tracker::sub_buckets - 1;
  const std::uint64_t mantissa = bucket - latency_tracker::sub_buckets * shift;
  return duration(static_cast<duration::rep>(((mantissa + 1) << shift) - 1));
}

// A cached snapshot in one word: the percentile's bucket + 1 (12 bits, 0:
// no success), the longest censored limit's bucket + 1 (12 bits, 0: none),
// the censored-majority flag, and the successes (39 bits, saturating).
constexpr std::uint64_t successes_max = (std::uint64_t{1} << 39) - 1;

std::uint64_t pack(std::size_t percentile_bucket1, std::size_t censored_bucket1, bool majority,
                   std::uint64_t successes) noexcept {
  return (std::uint64_t{percentile_bucket1} << 52) | (std::uint64_t{censored_bucket1} << 40) |
         (std::uint64_t{majority} << 39) | std::min(successes, successes_max);
}

latency_snapshot unpack(std::uint64_t word) noexcept {
  latency_snapshot s;
  const std::size_t p = static_cast<std::size_t>(word >> 52);
  const std::size_t c = static_cast<std::size_t>((word >> 40) & 0xfff);
  s.percentile = p == 0 ? duration::zero() : edge_of(p - 1);
  s.longest_censored = c == 0 ? duration::zero() : edge_of(c - 1);
  s.censored_majority = ((word >> 39) & 1) != 0;
  s.successes = word & successes_max;
  return s;
}

// Percentiles are keyed in millionths of a percent (1 to 100,000,000).
std::uint32_t key_of(double percentile) noexcept {
  if (!(percentile > 0.0)) return 1;
  if (percentile >= 100.0) return 100'000'000;
  return std::max<std::uint32_t>(1, static_cast<std::uint32_t>(percentile * 1e6 + 0.5));
}

void check_tracker_option(bool ok, const char* problem) {
  if (!ok) throw std::invalid_argument(std::string("coretry::latency_tracker options: ") + problem);
}

} // namespace

latency_result latency_result_of(const attempt_record& record) noexcept {
  if (record.error == attempt_error::timed_out) return latency_result::timeout;
  return record.classified.status == attempt_status::success ? latency_result::success : latency_result::failure;
}

std::string_view to_string(latency_result result) noexcept {
  switch (result) {
  case latency_result::success: return "success";
  case latency_result::timeout: return "timeout";
  case latency_result::failure: return "failure";
  }
  return "invalid";
}

// A sub-window: its period (time since the epoch / width) shifted left by
// one, the low bit set while it is being cleared; its successes by bucket;
// its timeouts and their longest limit's bucket + 1; its other failures.
struct latency_tracker::sub_window {
  std::atomic<std::int64_t> state{0};
  std::atomic<std::uint32_t> censored{0};
  std::atomic<std::uint32_t> longest_censored{0};
  std::atomic<std::uint32_t> failures{0};
  std::array<std::atomic<std::uint32_t>, bucket_count> buckets{};
};

latency_tracker::latency_tracker(const options& opts) : options_(opts) {
  using namespace std::chrono_literals;
  check_tracker_option(opts.window >= duration(1ms) && opts.window <= duration(24h), "window must be between 1 ms and 24 h");
  check_tracker_option(opts.sub_windows >= 1 && opts.sub_windows <= 60, "sub_windows must be between 1 and 60");
  check_tracker_option(opts.refresh_interval >= duration::zero() && opts.refresh_interval <= opts.window,
        "refresh_interval must be between 0 and the window");
  width_ = opts.window / opts.sub_windows;
  windows_ = std::make_unique<sub_window[]>(opts.sub_windows);
}

latency_tracker::~latency_tracker() = default;

std::int64_t latency_tracker::period_of(duration now) const noexcept {
  return now <= duration::zero() ? 0 : now / width_;
}

void latency_tracker::record(latency_result result, duration latency, duration now) noexcept {
  // The period and its sub-window without dividing, while `now` falls in
  // the last period seen (nearly every record): `last_` packs that period
  // (shifted left by 6) and its sub-window's index.
  std::int64_t period;
  std::size_t index;
  const std::int64_t last = last_.load(std::memory_order_relaxed);
  const duration since = now - width_ * (last >> 6);
  if (since >= duration::zero() && since < width_) {
    period = last >> 6;
    index = static_cast<std::size_t>(last & 63);
  } else {
    period = period_of(now);
    index = static_cast<std::size_t>(period % options_.sub_windows);
    if (period > (last >> 6)) last_.store((period << 6) | static_cast<std::int64_t>(index), std::memory_order_relaxed);
  }
  sub_window& w = windows_[index];
  std::int64_t state = w.state.load(std::memory_order_acquire);
  if ((state >> 1) != period) {
    // Older than the sub-window's period (a window late), or the sub-window
    // is being cleared for another period: dropped.
    if ((state >> 1) > period || (state & 1) != 0) return;
    if (w.state.compare_exchange_strong(state, (period << 1) | 1, std::memory_order_acq_rel)) {
      for (auto& b : w.buckets) b.store(0, std::memory_order_relaxed);
      w.censored.store(0, std::memory_order_relaxed);
      w.longest_censored.store(0, std::memory_order_relaxed);
      w.failures.store(0, std::memory_order_relaxed);
      w.state.store(period << 1, std::memory_order_release);
    } else if ((state >> 1) != period) {
      return; // another thread moved it to another period meanwhile
    }
  }
  switch (result) {
  case latency_result::success: w.buckets[bucket_of(latency)].fetch_add(1, std::memory_order_relaxed); break;
  case latency_result::timeout: {
    w.censored.fetch_add(1, std::memory_order_relaxed);
    const auto b1 = static_cast<std::uint32_t>(bucket_of(latency) + 1);
    std::uint32_t seen = w.longest_censored.load(std::memory_order_relaxed);
    while (seen < b1 && !w.longest_censored.compare_exchange_weak(seen, b1, std::memory_order_relaxed)) {
    }
    break;
  }
  case latency_result::failure: w.failures.fetch_add(1, std::memory_order_relaxed); break;
  }
}

latency_snapshot latency_tracker::compute(double percentile, duration now) const noexcept {
  // The sub-windows of the window at `now`: not being cleared, of a period
  // in (now's - sub_windows, now's].
  const std::int64_t current = period_of(now);
  std::array<const sub_window*, 60> live{};
  std::size_t n = 0;
  for (unsigned i = 0; i < options_.sub_windows; ++i) {
    const sub_window& w = windows_[i];
    const std::int64_t state = w.state.load(std::memory_order_acquire);
    const std::int64_t period = state >> 1;
    if ((state & 1) != 0 || period > current || period <= current - options_.sub_windows) continue;
    live[n++] = &w;
  }
  std::uint64_t successes = 0, censored = 0, failures = 0;
  std::uint32_t longest = 0;
  for (std::size_t i = 0; i < n; ++i) {
    for (const auto& b : live[i]->buckets) successes += b.load(std::memory_order_relaxed);
    censored += live[i]->censored.load(std::memory_order_relaxed);
    failures += live[i]->failures.load(std::memory_order_relaxed);
    longest = std::max(longest, live[i]->longest_censored.load(std::memory_order_relaxed));
  }
  latency_snapshot s;
  s.successes = successes;
  const std::uint64_t attempts = successes + censored + failures;
  s.censored_majority = attempts >= min_censored_attempts && 2 * censored > attempts;
  s.longest_censored = longest == 0 ? duration::zero() : edge_of(longest - 1);
  if (successes == 0) return s;
  // Nearest rank: the smallest sample with at least ceil(q x n) samples at or below it.
  const double q = static_cast<double>(key_of(percentile)) / 1e8;
  const auto rank = std::clamp<std::uint64_t>(
      static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(successes) - 1e-9)), 1, successes);
  std::uint64_t seen = 0;
  std::size_t last = 0;
  for (std::size_t b = 0; b < bucket_count; ++b) {
    std::uint64_t here = 0;
    for (std::size_t i = 0; i < n; ++i) here += live[i]->buckets[b].load(std::memory_order_relaxed);
    if (here == 0) continue;
    last = b;
    seen += here;
    if (seen >= rank) break;
  }
  // (Samples recorded between the two scans can only add to the counts;
  // a sub-window cleared between them leaves `last`, the highest seen.)
  s.percentile = edge_of(last);
  return s;
}

duration latency_tracker::percentile(double percentile, duration now) const noexcept {
  return compute(percentile, now).percentile;
}

std::uint64_t latency_tracker::successes(duration now) const noexcept { return compute(100.0, now).successes; }

duration latency_tracker::upper_edge(duration d) noexcept { return edge_of(bucket_of(d)); }

latency_tracker::cache_entry* latency_tracker::entry_for(std::uint32_t key) noexcept {
  for (auto& e : cache_)
    if (e.key.load(std::memory_order_acquire) == key) return &e;
  for (auto& e : cache_) {
    std::uint32_t expected = 0;
    if (e.key.compare_exchange_strong(expected, key, std::memory_order_acq_rel) || expected == key) return &e;
  }
  return nullptr;
}

latency_snapshot latency_tracker::snapshot(double percentile, duration now) noexcept {
  const std::uint32_t key = key_of(percentile);
  cache_entry* e = entry_for(key);
  if (!e) return compute(percentile, now);
  const bool computed = e->computed.load(std::memory_order_acquire);
  if (computed) {
    const duration at(e->computed_at.load(std::memory_order_relaxed));
    if (now >= at && now - at < options_.refresh_interval)
      return unpack(e->packed.load(std::memory_order_relaxed));
    if (now < at) return unpack(e->packed.load(std::memory_order_relaxed)); // a caller behind the refresh
  }
  if (e->busy.exchange(true, std::memory_order_acquire)) {
    // Another thread is refreshing: its previous answer, if there is one, will do.
    if (computed) return unpack(e->packed.load(std::memory_order_relaxed));
    return compute(percentile, now);
  }
  const latency_snapshot s = compute(percentile, now);
  const std::size_t p1 = s.successes == 0 ? 0 : bucket_of(s.percentile) + 1;
  const std::size_t c1 = s.longest_censored == duration::zero() ? 0 : bucket_of(s.longest_censored) + 1;
  e->packed.store(pack(p1, c1, s.censored_majority, s.successes), std::memory_order_relaxed);
  e->computed_at.store(now.count(), std::memory_order_relaxed);
  e->computed.store(true, std::memory_order_release);
  e->busy.store(false, std::memory_order_release);
  return unpack(pack(p1, c1, s.censored_majority, s.successes));
}

} // namespace coretry
