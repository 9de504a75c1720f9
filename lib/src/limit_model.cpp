#include <coretry/limit_model.hpp>

#include <algorithm>
#include <bit>
#include <cmath>

namespace coretry {

limit_model::limit_model(const options& opts) noexcept
    : options_(opts), published_(static_cast<unsigned>(opts.initial_limit)), limit_(opts.initial_limit) {}

unsigned limit_model::bucket_of(duration latency) noexcept {
  const auto ns = latency.count();
  if (ns <= 0) return 0;
  const auto v = static_cast<std::uint64_t>(ns);
  const unsigned power = static_cast<unsigned>(std::bit_width(v)) - 1;
  if (power < lowest_power) return 0;
  if (power >= highest_power) return bucket_count - 1;
  const unsigned sub = static_cast<unsigned>(v >> (power - 3)) & (sub_buckets - 1);
  return (power - lowest_power) * sub_buckets + sub;
}

duration limit_model::value_of(unsigned bucket) noexcept {
  const unsigned power = lowest_power + bucket / sub_buckets;
  const std::uint64_t width = std::uint64_t{1} << (power - 3);
  const std::uint64_t lower = (sub_buckets + bucket % sub_buckets) * width;
  return duration(static_cast<duration::rep>(lower + width / 2));
}

void limit_model::record(duration latency, bool drop) noexcept {
  if (drop)
    drops_.fetch_add(1, std::memory_order_relaxed);
  else
    buckets_[bucket_of(latency)].fetch_add(1, std::memory_order_relaxed);
}

void limit_model::saw_in_flight(unsigned n) noexcept {
  unsigned peak = peak_.load(std::memory_order_relaxed);
  while (n > peak && !peak_.compare_exchange_weak(peak, n, std::memory_order_relaxed)) {
  }
}

limit_model::verdict limit_model::close_window(duration now, unsigned in_flight) noexcept {
  std::int64_t due = deadline_.load(std::memory_order_acquire);
  if (due == closing) return verdict::none;
  if (due == 0) {
    // The first window opens at the first end seen.
    const std::int64_t first = std::max<std::int64_t>(1, (now + options_.window).count());
    deadline_.compare_exchange_strong(due, first, std::memory_order_acq_rel);
    return verdict::none;
  }
  if (now.count() < due) return verdict::none;
  if (!deadline_.compare_exchange_strong(due, closing, std::memory_order_acquire)) return verdict::none;
  // This caller closes the window: nobody else touches the rule's state
  // until the deadline is stored again (release).
  std::uint64_t ends = drops_.load(std::memory_order_relaxed);
  for (const auto& b : buckets_) ends += b.load(std::memory_order_relaxed);
  if (ends < options_.min_window_samples) {
    deadline_.store(due, std::memory_order_release); // stays open
    return verdict::none;
  }
  std::array<std::uint32_t, bucket_count> counts;
  window_summary w;
  for (unsigned i = 0; i < bucket_count; ++i) {
    counts[i] = buckets_[i].exchange(0, std::memory_order_relaxed);
    w.samples += counts[i];
  }
  w.drops = drops_.exchange(0, std::memory_order_relaxed);
  w.peak_in_flight = peak_.exchange(in_flight, std::memory_order_relaxed);
  if (w.samples > 0) {
    // Nearest rank: the smallest value with at least half the samples at or below it.
    const std::uint64_t rank = (w.samples + 1) / 2;
    std::uint64_t seen = 0;
    for (unsigned i = 0; i < bucket_count; ++i) {
      seen += counts[i];
      if (seen >= rank) {
        w.median = value_of(i);
        break;
      }
    }
  }
  const verdict v = judge(w);
  deadline_.store(std::max<std::int64_t>(1, (now + options_.window).count()), std::memory_order_release);
  return v;
}

limit_model::verdict limit_model::judge(const window_summary& w) noexcept {
  verdict v = verdict::held;
  const double before = limit_;
  const bool judged = w.samples >= options_.min_window_samples;
  if (judged) remember(w.median);
  if (w.drops > 0 && w.drops * 100 >= w.samples + w.drops) {
    limit_ *= options_.decrease;
    stuck_ = 0;
    v = verdict::decreased_drops;
  } else {
    const duration base = baseline();
    if (judged && base > duration::zero() &&
        static_cast<double>(w.median.count()) > options_.tolerance * static_cast<double>(base.count())) {
      const double ratio = static_cast<double>(base.count()) / static_cast<double>(w.median.count());
      limit_ *= std::max(0.5, ratio);
      v = verdict::decreased_latency;
      // At the floor and still queueing: the queue is not this limit's to
      // drain (the dependency became slower, or others fill it).
      if (before <= options_.min_limit && ++stuck_ >= stuck_windows) {
        slot_min_.fill(0);
        in_slot_ = 0;
        slot_min_[slot_] = w.median.count();
        stuck_ = 0;
      }
    } else {
      stuck_ = 0;
      if (2.0 * w.peak_in_flight >= limit_) {
        limit_ += std::max(1.0, std::sqrt(limit_) / 2.0);
        v = verdict::increased;
      }
    }
  }
  limit_ = std::clamp(limit_, options_.min_limit, options_.max_limit);
  publish();
  return v;
}

void limit_model::remember(duration median) noexcept {
  const std::int64_t m = std::max<std::int64_t>(1, median.count());
  std::int64_t& slot = slot_min_[slot_];
  if (slot == 0 || m < slot) slot = m;
  if (++in_slot_ == windows_per_slot) {
    in_slot_ = 0;
    slot_ = (slot_ + 1) % baseline_slots;
    slot_min_[slot_] = 0;
  }
}

void limit_model::publish() noexcept {
  published_.store(static_cast<unsigned>(std::floor(limit_)), std::memory_order_relaxed);
  std::int64_t lowest = 0;
  for (const std::int64_t m : slot_min_)
    if (m != 0 && (lowest == 0 || m < lowest)) lowest = m;
  baseline_ns_.store(lowest, std::memory_order_relaxed);
}

} // namespace coretry
