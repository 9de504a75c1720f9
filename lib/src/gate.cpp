#include <coretry/gate.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace coretry {

using detail::saturating_add;

namespace {

// A window bucket is one 64-bit word: the bucket's epoch (low 24 bits of
// now / bucket width), then its successes and its transient failures, 20
// bits each (saturating). One word, so a result is counted with one
// compare-and-swap and no lock.
constexpr unsigned count_bits = 20;
constexpr std::uint64_t count_max = (std::uint64_t{1} << count_bits) - 1;
constexpr std::uint64_t tag_mask = (std::uint64_t{1} << 24) - 1;
// How many bucket widths late a result may be and still be told apart from a
// stale bucket: four windows.
constexpr std::uint64_t late_results = 40;

constexpr std::uint64_t tag_of(std::uint64_t word) noexcept { return word >> (2 * count_bits); }
constexpr std::uint64_t accepts_of(std::uint64_t word) noexcept { return (word >> count_bits) & count_max; }
constexpr std::uint64_t failures_of(std::uint64_t word) noexcept { return word & count_max; }
constexpr std::uint64_t pack(std::uint64_t tag, std::uint64_t accepts, std::uint64_t failures) noexcept {
  return (tag << (2 * count_bits)) | (accepts << count_bits) | failures;
}


duration saturating_mul(duration d, unsigned n) noexcept {
  return d.count() > duration::max().count() / static_cast<duration::rep>(n) ? duration::max() : d * n;
}

void check_gate_option(bool ok, const char* problem) {
  if (!ok) throw std::invalid_argument(std::string("coretry::gate_model options: ") + problem);
}

} // namespace

gate_model::gate_model(const options& opts) : options_(opts) {
  using namespace std::chrono_literals;
  check_gate_option(opts.window >= duration(1ms) && opts.window <= duration(24h), "window must be between 1 ms and 24 h");
  check_gate_option(opts.min_requests >= 1 && opts.min_requests <= 1'000'000, "min_requests must be between 1 and 1000000");
  check_gate_option(std::isfinite(opts.k) && opts.k >= 1.0 && opts.k <= 1000.0, "k must be a number between 1 and 1000");
  check_gate_option(std::isfinite(opts.close_above) && opts.close_above >= 0.0 && opts.close_above < 1.0,
        "close_above must be a number from 0 up to (not including) 1");
  check_gate_option(opts.probe_interval > duration::zero() && opts.probe_interval <= duration(1h),
        "probe_interval must be positive and at most 1 h");
  check_gate_option(opts.step_successes >= 1 && opts.step_successes <= 1'000'000,
        "step_successes must be between 1 and 1000000");
  check_gate_option(opts.fallback_failures >= 1 && opts.fallback_failures <= 1'000'000,
        "fallback_failures must be between 1 and 1000000");
  check_gate_option(opts.slots_ahead >= 1 && opts.slots_ahead <= 1'000'000, "slots_ahead must be between 1 and 1000000");
  check_gate_option(opts.recheck_interval > duration::zero() && opts.recheck_interval <= duration(1h),
        "recheck_interval must be positive and at most 1 h");
  check_gate_option(opts.slow_start_steps <= 30, "slow_start_steps must be at most 30");
  check_gate_option(opts.probe_timeout > duration::zero() && opts.probe_timeout <= duration(1h),
        "probe_timeout must be positive and at most 1 h");
  check_gate_option(opts.max_hold > duration::zero() && opts.max_hold <= duration(24h),
        "max_hold must be positive and at most 24 h");
  bucket_width_ = opts.window / buckets;
}

std::int64_t gate_model::bucket_of(duration now) const noexcept {
  return now <= duration::zero() ? 0 : now / bucket_width_;
}

void gate_model::count(attempt_status result, duration now) noexcept {
  if (result == attempt_status::permanent) return;
  const bool success = result == attempt_status::success;
  const std::int64_t epoch = bucket_of(now);
  const std::uint64_t tag = static_cast<std::uint64_t>(epoch) & tag_mask;
  std::atomic<std::uint64_t>& bucket = window_[static_cast<std::size_t>(epoch) % buckets];
  std::uint64_t word = bucket.load(std::memory_order_relaxed);
  std::uint64_t next;
  do {
    if (word != 0 && tag_of(word) != tag) {
      // A result from a caller whose clock reading is older than the
      // bucket's (it was late to count, by a window or more): the bucket
      // holds newer results. Any other difference is a bucket last written
      // long ago, to be overwritten: however long the gate sat idle, a
      // stale tag is never taken for a newer one (the epoch is kept modulo
      // 2^24, so only one stale age in 2^24 buckets could be).
      const std::uint64_t ahead = (tag_of(word) - tag) & tag_mask;
      if (ahead <= late_results) return;
    }
    if (word != 0 && tag_of(word) == tag) {
      const std::uint64_t a = accepts_of(word) + (success && accepts_of(word) < count_max ? 1 : 0);
      const std::uint64_t f = failures_of(word) + (!success && failures_of(word) < count_max ? 1 : 0);
      next = pack(tag, a, f);
    } else {
      next = pack(tag, success ? 1 : 0, success ? 0 : 1);
    }
  } while (!bucket.compare_exchange_weak(word, next, std::memory_order_relaxed));
}

gate_model::counts gate_model::window_counts(duration now) const noexcept {
  counts c;
  const std::int64_t current = bucket_of(now);
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(buckets) && i <= current; ++i) {
    const std::int64_t epoch = current - i;
    const std::uint64_t word = window_[static_cast<std::size_t>(epoch) % buckets].load(std::memory_order_relaxed);
    if (tag_of(word) != (static_cast<std::uint64_t>(epoch) & tag_mask)) continue;
    c.accepts += accepts_of(word);
    c.requests += accepts_of(word) + failures_of(word);
  }
  return c;
}

gate_model::counts gate_model::judged_counts(duration now) const noexcept {
  counts c = window_counts(now);
  const counts p = peers();
  c.requests += p.requests;
  c.accepts += p.accepts;
  return c;
}

void gate_model::set_fleet(const counts& peers, unsigned processes, double phase) noexcept {
  const double p = std::isfinite(phase) ? std::clamp(phase, 0.0, 1.0) : 0.0;
  phase_.store(static_cast<std::uint32_t>(std::min(p * 4294967296.0, 4294967295.0)), std::memory_order_relaxed);
  constexpr std::uint64_t top = 0xffffffffu;
  const std::uint64_t r = std::min(peers.requests, top);
  const std::uint64_t a = std::min({peers.accepts, peers.requests, top});
  peers_.store((r << 32) | a, std::memory_order_relaxed);
  processes_.store(std::max(1u, processes), std::memory_order_relaxed);
}

gate_model::counts gate_model::peers() const noexcept {
  const std::uint64_t word = peers_.load(std::memory_order_relaxed);
  return {word >> 32, word & 0xffffffffu};
}

void gate_model::reconsider(duration now) noexcept {
  if (state_ == state::open && unhealthy(judged_counts(now))) close(now);
}

double gate_model::failure_pressure(const counts& c) const noexcept {
  const double requests = static_cast<double>(c.requests);
  return std::max(0.0, (requests - options_.k * static_cast<double>(c.accepts)) / (requests + 1.0));
}

bool gate_model::unhealthy(const counts& c) const noexcept {
  return c.requests >= options_.min_requests && failure_pressure(c) > options_.close_above;
}

double gate_model::first_attempt_rejection(duration now) const noexcept {
  if (!options_.throttle_first_attempts) return 0.0;
  const counts c = judged_counts(now);
  return c.requests >= options_.min_requests ? failure_pressure(c) : 0.0;
}

duration gate_model::slot_interval() const noexcept {
  const duration fleet = saturating_mul(options_.probe_interval, processes());
  return std::max(duration(1), fleet / (std::int64_t{1} << level_));
}

void gate_model::close(duration now) noexcept {
  state_ = state::recovering;
  level_ = 0;
  probe_out_ = 0;
  step_accepts_ = step_failures_ = 0;
  // A fleet's members close together: each takes its first slot at its own
  // phase of the (fleet-wide) slot interval, not all at once.
  const double phase = static_cast<double>(phase_.load(std::memory_order_relaxed)) / 4294967296.0;
  const auto offset = static_cast<duration::rep>(static_cast<double>(slot_interval().count()) * phase);
  next_slot_ = std::max(next_slot_, saturating_add(now, duration(offset)));
  ++generation_;
}

void gate_model::record(attempt_status result, duration now) noexcept {
  count(result, now);
  react(result, now);
}

void gate_model::react(attempt_status result, duration now) noexcept {
  if (result == attempt_status::permanent) return;
  if (state_ == state::open) {
    if (result == attempt_status::transient && unhealthy(judged_counts(now))) close(now);
    return;
  }
  step(result, now);
}

void gate_model::step(attempt_status result, duration now) noexcept {
  (result == attempt_status::success ? step_accepts_ : step_failures_) += 1;
  judge_step(now);
}

void gate_model::step_on_peers(std::uint64_t successes, std::uint64_t failures, duration now) noexcept {
  if (state_ != state::recovering || (successes == 0 && failures == 0)) return;
  constexpr std::uint64_t most = 1'000'000'000;
  step_accepts_ = static_cast<unsigned>(std::min<std::uint64_t>(step_accepts_ + std::min(successes, most), most));
  step_failures_ = static_cast<unsigned>(std::min<std::uint64_t>(step_failures_ + std::min(failures, most), most));
  judge_step(now);
}

void gate_model::judge_step(duration now) noexcept {
  const bool healthy =
      failure_pressure({std::uint64_t{step_accepts_} + step_failures_, step_accepts_}) <= options_.close_above;
  if (healthy && step_accepts_ >= options_.step_successes) {
    step_accepts_ = step_failures_ = 0;
    probe_out_ = 0;
    if (level_ < options_.slow_start_steps) {
      ++level_;
      return;
    }
    // Fully recovered: open, and forget the outage's failures so that they
    // do not close the gate again.
    state_ = state::open;
    level_ = 0;
    ++generation_;
    for (auto& bucket : window_) bucket.store(0, std::memory_order_relaxed);
    peers_.store(0, std::memory_order_relaxed);
    openings_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!healthy && step_failures_ >= options_.fallback_failures) {
    step_accepts_ = step_failures_ = 0;
    if (level_ == 0) return; // already at the probe rate: nothing handed out is revoked
    // Back to probes: the faster slots already handed out are revoked; their
    // holders get new ones at the probe rate when they come back.
    level_ = 0;
    probe_out_ = 0;
    ++generation_;
    next_slot_ = saturating_add(now, slot_interval()); // the probe rate (the fleet's, when shared)
  }
}

gate_decision gate_model::ask(duration now, duration latest, const gate_decision* held) noexcept {
  if (state_ == state::open) {
    if (!unhealthy(judged_counts(now))) return gate_decision::admit();
    close(now);
  }
  // Closed, a probe still out holds back the next one.
  const bool probe_out = level_ == 0 && probe_out_ != 0 && now - probe_out_since_ < options_.probe_timeout;
  if (held && held->what == gate_decision::action::wait && held->ticket == generation_) {
    if (now < held->at) return *held; // woke early: the slot is still ahead
    if (!probe_out) return admit_probe(now); // its own slot
    return recheck(now, latest);              // its slot came while a probe was still out
  }
  const duration slot = std::max(now, next_slot_);
  if (slot > latest) return gate_decision::deny(); // nothing reserved
  if (slot == now && probe_out) return recheck(now, latest); // a slot now, but a probe is out
  if (slot - now > saturating_mul(slot_interval(), options_.slots_ahead)) {
    // Further ahead than slots are promised: not promised at today's rate,
    // which may grow before then. The retry asks again later, unless it
    // could not come back before its latest instant.
    const gate_decision again = recheck(now, latest);
    if (again.what == gate_decision::action::wait) return again;
  }
  if (slot - now > options_.max_hold) return gate_decision::deny();
  next_slot_ = saturating_add(slot, slot_interval());
  if (slot == now) return admit_probe(now);
  return gate_decision::wait_until(slot, generation_);
}

gate_decision gate_model::recheck(duration now, duration latest) noexcept {
  // At a point of a golden-ratio sequence between one and two
  // recheck_interval away, so that the retries told to ask again come back
  // spread out.
  spread_ += 0x9e3779b9u;
  const auto extra = static_cast<duration::rep>(static_cast<double>(options_.recheck_interval.count()) *
                                                (static_cast<double>(spread_) / 4294967296.0));
  const duration again = saturating_add(saturating_add(now, options_.recheck_interval), duration(extra));
  if (again <= latest && again - now <= options_.max_hold) return gate_decision::wait_until(again, 0);
  return gate_decision::deny();
}

gate_decision gate_model::admit_probe(duration now) noexcept {
  const std::uint64_t ticket = ++probes_;
  if (level_ == 0) {
    probe_out_ = ticket;
    probe_out_since_ = now;
  }
  return gate_decision::admit_probe(ticket);
}

void gate_model::probe_ended(std::uint64_t ticket) noexcept {
  if (ticket != 0 && ticket == probe_out_) probe_out_ = 0;
}

void local_gate::record(attempt_status result, duration now) noexcept {
  if (result == attempt_status::permanent) return;
  model_.count(result, now);
  recorded_requests_.fetch_add(1, std::memory_order_relaxed);
  if (result == attempt_status::success) recorded_accepts_.fetch_add(1, std::memory_order_relaxed);
  // Open and healthy: nothing to decide, no lock.
  if (open_.load(std::memory_order_acquire) &&
      (result == attempt_status::success || !model_.unhealthy(model_.judged_counts(now))))
    return;
  std::lock_guard lock(mutex_);
  model_.react(result, now);
  open_.store(model_.current() == gate_model::state::open, std::memory_order_release);
}

gate_decision local_gate::counted(gate_decision d, bool probe) noexcept {
  switch (d.what) {
  case gate_decision::action::admit:
    admitted_.fetch_add(1, std::memory_order_relaxed);
    if (probe) probes_.fetch_add(1, std::memory_order_relaxed);
    break;
  case gate_decision::action::wait: held_.fetch_add(1, std::memory_order_relaxed); break;
  case gate_decision::action::deny: denied_.fetch_add(1, std::memory_order_relaxed); break;
  }
  return d;
}

gate_decision local_gate::ask(duration now, duration latest, const gate_decision* held) noexcept {
  if (open_.load(std::memory_order_acquire) && !model_.unhealthy(model_.judged_counts(now)))
    return counted(gate_decision::admit(), false);
  std::lock_guard lock(mutex_);
  const gate_decision d = model_.ask(now, latest, held);
  const bool open = model_.current() == gate_model::state::open;
  open_.store(open, std::memory_order_release);
  return counted(d, !open);
}

bool local_gate::allow_first_attempt(duration now, random_source& random) {
  const double p = model_.first_attempt_rejection(now);
  if (p <= 0.0) return true;
  constexpr std::uint64_t top = (std::uint64_t{1} << 32) - 1;
  const double draw = static_cast<double>(random.uniform(top)) / static_cast<double>(top + 1);
  if (draw >= p) return true;
  throttled_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void local_gate::probe_ended(std::uint64_t ticket) noexcept {
  if (ticket == 0) return;
  std::lock_guard lock(mutex_);
  model_.probe_ended(ticket);
}

local_gate::answers local_gate::counts() const noexcept {
  return {admitted_.load(std::memory_order_relaxed), probes_.load(std::memory_order_relaxed),
          held_.load(std::memory_order_relaxed), denied_.load(std::memory_order_relaxed),
          throttled_.load(std::memory_order_relaxed)};
}

void local_gate::set_fleet(const gate_model::counts& peers, unsigned processes, duration now, double phase) noexcept {
  const gate_model::counts before = model_.peers();
  // Counts from before a fall back (a gate on its own) are no baseline: the
  // first exchange after one brings the whole window, not what is new.
  const bool baseline = model_.processes() > 1;
  model_.set_fleet(peers, processes, phase);
  const bool open = open_.load(std::memory_order_acquire);
  if (open && !model_.unhealthy(model_.judged_counts(now))) return;
  std::lock_guard lock(mutex_);
  if (open) {
    model_.reconsider(now);
  } else if (baseline) {
    // What the peers recorded since the last exchange (a window that slid
    // past old buckets may show less: nothing new is taken then).
    const gate_model::counts after = model_.peers();
    const std::uint64_t requests = after.requests > before.requests ? after.requests - before.requests : 0;
    const std::uint64_t accepts = after.accepts > before.accepts ? after.accepts - before.accepts : 0;
    model_.step_on_peers(std::min(accepts, requests), requests - std::min(accepts, requests), now);
  }
  open_.store(model_.current() == gate_model::state::open, std::memory_order_release);
}

unsigned local_gate::level() const {
  std::lock_guard lock(mutex_);
  return model_.level();
}

} // namespace coretry
