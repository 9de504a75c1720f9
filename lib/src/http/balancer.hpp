#ifndef CORETRY_SRC_HTTP_BALANCER_HPP
#define CORETRY_SRC_HTTP_BALANCER_HPP

// Which of a name's addresses the next request goes to: power of two choices
// over a cost per address (a peak-sensitive moving average of its latency
// times the square root of its requests in flight plus one), with a slow
// start for an address that is new, back from an ejection or past a
// failure's hold. The rule alone: no I/O, no clock
// reads (every instant is an argument), no randomness of its own (the
// caller hands a source in), no lock (the caller's lock guards it), no
// allocation (a fixed array of max_balanced_addresses slots). Internal to
// coretry::http; see lib/docs/http.md, "Spreading load over addresses".
//
// Addresses are slots 0..size()-1, in the order of the caller's list (the
// address book's); a set of them is a 64-bit mask, bit i for slot i.

#include <coretry/http/balance_mode.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>

namespace coretry::http::detail {

/// Slots a balancer keeps: the address book keeps at most as many addresses
/// of a name (max_addresses_per_name), and a set of slots is one 64-bit
/// mask. A list longer than this is cut: its addresses past the 64th are
/// never picked (and a record for them is neither kept nor asked for).
/// A balancer is a fixed array of them: 2,672 bytes on a 64-bit machine.
inline constexpr std::size_t max_balanced_addresses = 64;

/// A set of slots: bit i stands for slot i.
using address_set = std::uint64_t;

/// How a new request's address is chosen (the client's option,
/// coretry/http/balance_mode.hpp). first_to_connect: pick() answers none,
/// the caller keeps its own order.
using coretry::http::balance_mode;

/// The balancer's parameters. Defaults and why:
/// - `decay` 10 s: Finagle's and tower's default time constant. A latency
///   peak is forgotten by a factor e every 10 s without answers, so an
///   address that was slow once is tried again within about half a minute
///   (80 ms falls to 5 ms in 28 s) while a burst of slow answers still
///   steers traffic away for seconds. Shorter was measured through the
///   bookstore (tests/bench/balance.sh, 15 s runs): with 1 s, four equal
///   5 ms addresses kept within 24.1% to 26.0% each over four runs (18.4%
///   to 32.4% over eleven with 10 s: a scheduler's delay is a peak that
///   weighs for seconds), but an address of a quarter of the others'
///   capacity got 10.9% of the calls and p99 1.57 to 1.58 times four equal
///   ones' (the target is 1.5; 10 s: 1.36 to 1.43); 2 s was between (21.4%
///   to 29.1%; 1.49 to 1.51 times). A peak that lasts is what keeps a
///   queueing address's share down.
/// - `default_rtt` 30 ms: Linkerd's figure, the latency assumed for an
///   address with no answer yet while requests are in flight to it; with
///   none in flight such an address costs nothing, so it is tried once.
/// - `slow_start_window` 2 s, linear (`slow_start_aggression` 1), at least
///   `slow_start_min_weight` 10% (Envoy's min_weight_percent): a returning
///   address weighs max(0.1, t / 2 s) against 1 for the others (see pick).
///   The target: at most its fair share over its first 500 ms, at least half
///   of it by 2 s. Its weight is then at most 1/4, and 1/2 at 1 s; fewer
///   requests in flight win it some of that back. Through the bookstore
///   (tests/bench/balance.sh, `return`, eight runs: seeds 1 to 3 and seed 1
///   again, limit off and adaptive), an address back after 4 s down got 3.8%
///   to 7.4% of the calls over its first 500 ms (fair: 25%) and 19.4% to
///   32.2% from 1 s to 2 s. A 3 s window, the choice before, left too little
///   room on the second side: 9.8% to 20.9% from 1 s to 2 s in fourteen runs,
///   three of them under half the fair share (12.5%); the first 500 ms took
///   2.2% to 7.8%, far from the bound. Envoy has no default window.
/// - `failure_penalty` 1 s: the least sample a failure gives (see failed):
///   far above a healthy answer where a client balances (a few ms in a
///   data centre; 33 times default_rtt), so one failure puts the address
///   behind every healthy one at once. A fixed floor rather than the
///   attempt's limit: a refused connect takes no time and a request may
///   have no limit; a failure that took longer (a time-out) counts its own
///   time. Where healthy answers take a second or more, a failing address
///   is no costlier than one of them: ejection is what keeps it out then.
/// - `in_flight_bias` 0.5: the cost is latency x (in flight + 1)^0.5, not
///   x (in flight + 1) as Finagle's and tower's (Envoy's least_request has
///   the same knob, active_request_bias, 1 by default). The plain product
///   takes a request in flight to be a request queued, true of a server
///   that serves one at a time; a server of many workers has requests in
///   flight and no queue, so the product sends to an address of fewer
///   workers until its queue is long. Through the bookstore
///   (tests/bench/balance.sh), pricing at four addresses, one with a
///   quarter of the others' workers, at 60% of their capacity: with 1 it
///   got 11.8% of the calls and p99 was 46.6 ms in two runs (1.7 times the
///   26.9 and 27.4 ms of four equal ones); with 0.5, 9.3% and 9.6% (its
///   capacity is 7.7% of the whole) and 37.4 and 40.4 ms (1.34 and 1.47
///   times 27.9 and 27.4 ms; the README's runs, 10.0%, 1.41 and 1.42
///   times). Four equal 5 ms addresses got 20% to 29% each either way,
///   and an 80 ms one beside 5 ms ones 0.0%. A tie band was tried too (as
///   many in flight and estimates within 25%: the first drawn serves),
///   against the noise of equal addresses' estimates at low load: over six
///   15 s runs each, the shares of four equal addresses strayed from 25%
///   by 1.4 points on average without it and 1.2 with it, with the worst
///   run on its side (19.5%); not kept. Nor a ceiling on a peak (at most
///   twice the estimate): no tighter shares.
/// - `failure_hold` 1 s, doubling with each failure in a row up to
///   `failure_hold_max` 10 s: how long that penalty stands. When the hold
///   ends, the address is one with no answer yet, starting slow: tried by
///   one request, then ramping up. Without it the penalty would decay like
///   any sample, and an address down for a moment would wait until 10 s x
///   ln(1 s / the others' cost) had passed (53 s against 5 ms answers)
///   before a request tried it again. An address down for long is tried
///   after 1, 2, 4, 8, then every 10 s (and ejection, five failures in a
///   row, takes it out for longer); one back up is found within that time.
/// - `resample_after` 1,000: an address to which no request of the name
///   has started while this many started to the others (re-sends within
///   an attempt count) is tried again: while idle it costs nothing, like an
///   address with no sample, and the answer to the request it gets (its
///   probe) replaces its estimate. While the probe is out the address keeps
///   its estimate, so it is not taken for a cheap one meanwhile (priced at
///   default_rtt instead, a 2 s address among 200 ms ones drew 19% of the
///   picks in the tests' simulation); a probe that ends unanswered leaves
///   the estimate as it was. The decay alone forgets a peak in time, not in
///   requests: where answers take 100 us, one descheduled answer of 1 ms
///   put its address behind the other for 10 s x ln(10 / 3) = 12 s of
///   25,000 requests a second (two equal addresses behind the bookstore got
///   67.5/32.5% and 57.8/42.2% of the calls in 20 s runs,
///   tests/bench/many_addresses.sh). An address that is really slower gets
///   one request in resample_after + 1 that way: 0.1% (an 80 ms one beside
///   5 ms ones, where the target is at most 0.5%). 0: never. Between a pick
///   and its start (the caller's lock taken twice, a connection opened
///   between) more picks may choose the same idle address, as they may one
///   with no sample.
struct balancer_options {
  balance_mode mode = balance_mode::least_cost;
  std::chrono::nanoseconds decay = std::chrono::seconds(10);       ///< positive
  std::chrono::nanoseconds default_rtt = std::chrono::milliseconds(30); ///< not negative
  std::chrono::nanoseconds slow_start_window = std::chrono::seconds(2); ///< not negative; zero: no slow start
  double slow_start_aggression = 1.0; ///< weight = (t / window)^(1 / aggression); positive
  double slow_start_min_weight = 0.1; ///< (0, 1]
  std::chrono::nanoseconds failure_penalty = std::chrono::seconds(1); ///< not negative
  std::chrono::nanoseconds failure_hold = std::chrono::seconds(1); ///< not negative; zero: the penalty just decays
  std::chrono::nanoseconds failure_hold_max = std::chrono::seconds(10); ///< at least failure_hold
  double in_flight_bias = 0.5; ///< cost = latency x (in flight + 1)^bias; in [0.1, 4] (latency^(1/bias) stays finite)
  std::uint32_t resample_after = 1000; ///< requests started to the others; 0: never
};

/// Throws std::invalid_argument naming the first bad option of `o`.
inline void check_balancer_options(const balancer_options& o) {
  if (o.decay.count() <= 0) throw std::invalid_argument("balancer decay must be positive");
  if (o.default_rtt.count() < 0) throw std::invalid_argument("balancer default_rtt must not be negative");
  if (o.slow_start_window.count() < 0) throw std::invalid_argument("balancer slow_start_window must not be negative");
  if (!(o.slow_start_aggression > 0) || !std::isfinite(o.slow_start_aggression))
    throw std::invalid_argument("balancer slow_start_aggression must be positive");
  if (!(o.slow_start_min_weight > 0 && o.slow_start_min_weight <= 1))
    throw std::invalid_argument("balancer slow_start_min_weight must be in (0, 1]");
  if (o.failure_penalty.count() < 0) throw std::invalid_argument("balancer failure_penalty must not be negative");
  if (o.failure_hold.count() < 0) throw std::invalid_argument("balancer failure_hold must not be negative");
  // Bounded so that an instant plus either never overflows a clock.
  if (o.failure_hold_max > std::chrono::hours(24))
    throw std::invalid_argument("balancer failure_hold_max must be at most 24 hours");
  if (o.slow_start_window > std::chrono::hours(24))
    throw std::invalid_argument("balancer slow_start_window must be at most 24 hours");
  if (!(o.in_flight_bias >= 0.1 && o.in_flight_bias <= 4))
    throw std::invalid_argument("balancer in_flight_bias must be in [0.1, 4]");
  if (o.failure_hold_max < o.failure_hold)
    throw std::invalid_argument("balancer failure_hold_max must not be shorter than failure_hold");
}

/// A source of uniform draws: uniform(m) is in [0, m]. coretry::random_source
/// is one; a plain generator with that member is another (no virtual call).
template <class R>
concept uniform_draws = requires(R& r, std::uint64_t m) {
  { r.uniform(m) } -> std::convertible_to<std::uint64_t>;
};

/// The balancer of one name's addresses, on the clock of `TimePoint`.
///
/// **Cost** of an address at `now`: its latency estimate (below) times
/// (its requests in flight plus one)^in_flight_bias. An address with no
/// sample yet costs nothing while nothing is in flight to it (so it is
/// tried), else its estimate is default_rtt; so does one to which no
/// request started while resample_after started to the others (stale),
/// whose next request is a probe: its answer replaces the estimate.
/// Samples are answers'
/// latencies and failures (failed(): at least failure_penalty), so an
/// address that refuses connections or never answers is costly, not free,
/// until its hold ends (failure_hold, doubling with each failure in a row;
/// the penalty decays meanwhile like any estimate): then it is an address
/// with no sample again, starting slow. An answer during the hold ends the
/// count of failures in a row, not the hold.
///
/// **Latency estimate** (peak EWMA, as Finagle's and tower's): between
/// samples it decays toward zero, e(t) = e x w with w = exp(-elapsed /
/// decay), elapsed since the latest sample (what those libraries do on each
/// read, here without depending on how often anyone reads): an address
/// left alone after a slow spell becomes cheap again and is tried. A sample
/// at `t` above e(t) replaces it; one at or below it moves e(t) toward the
/// sample: e(t) x w + sample x (1 - w), between the two, so a faster answer
/// never raises the estimate. (Blending the stored e, undecayed, would:
/// 10 ms stored 5 s ago reads 6.07 ms, and a 6 ms answer would make it
/// 8.43 ms.) The first sample is taken as it is.
///
/// **Pick**: from the candidates, less the avoided ones while another
/// candidate is left, two distinct slots are drawn uniformly and the
/// cheaper of the two wins (the first drawn on a tie). A winner in its slow
/// start, lighter than the other of the two, serves with probability the
/// ratio of their weights (a third draw), else the other does: its share is
/// about its weight times what its cost would win it, whatever the number
/// of addresses (a draw of the two by weight would change nothing with two
/// addresses, both always drawn), and addresses that start together (a new
/// list) keep the plain rule. One candidate is answered without a draw.
template <class TimePoint>
class basic_balancer {
public:
  using time_point = TimePoint;
  using clock_duration = typename TimePoint::duration;
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  /// A slot's slow-start weight in units: 1024 is the full weight.
  static constexpr std::uint64_t full_weight = 1024;

  /// Options are not checked here (check_balancer_options does).
  explicit basic_balancer(const balancer_options& o = {}) noexcept : options_(o) {}

  /// `n` addresses (at most max_balanced_addresses are kept), none known:
  /// every one starts slow at `now` (all equally, so none is favoured).
  void assign(std::size_t n, TimePoint now) noexcept {
    size_ = std::min(n, max_balanced_addresses);
    for (std::size_t i = 0; i < size_; ++i) slots_[i] = fresh(now);
    slow_until_ = size_ == 0 ? TimePoint{} : now + window();
  }

  /// A new list: slot i takes the record of the previous slot `previous[i]`
  /// (requests in flight, estimate, slow start), or starts afresh at `now`
  /// when it is npos or out of range (an address the last list did not hold).
  /// Name each previous slot once at most (else its requests count twice).
  void relist(std::span<const std::size_t> previous, TimePoint now) noexcept {
    const std::array<slot, max_balanced_addresses> before = slots_;
    const std::size_t old_size = size_;
    size_ = std::min(previous.size(), max_balanced_addresses);
    for (std::size_t i = 0; i < size_; ++i) {
      const bool kept = previous[i] < old_size;
      slots_[i] = kept ? before[previous[i]] : fresh(now);
      if (!kept) slow_until_ = std::max(slow_until_, now + window());
    }
  }

  /// Slots in use.
  std::size_t size() const noexcept { return size_; }

  /// `i` is back from an ejection at `now`: what it was known by is
  /// forgotten (its requests in flight are kept), and it starts slow.
  void returned(std::size_t i, TimePoint now) noexcept {
    if (i >= size_) return;
    const unsigned in_flight = slots_[i].outstanding;
    slots_[i] = fresh(now);
    slots_[i].outstanding = in_flight;
    slow_until_ = std::max(slow_until_, now + window());
  }

  /// A request to `i` started (a re-send within its attempt too). If `i`
  /// is stale and idle, this request is its probe: until it ends, `i`
  /// keeps its estimate (so it is not taken for a cheap address meanwhile),
  /// and the probe's answer replaces that estimate as a first sample would.
  void started(std::size_t i) noexcept {
    if (i >= size_) return;
    slot& s = slots_[i];
    if (s.outstanding == 0 && stale(s)) s.probing = true;
    s.last_start = ++starts_;
    ++s.outstanding;
  }

  /// A request to `i` was answered at `now` after `latency`: it ends, the
  /// latency is a sample, and the address's failures in a row are over.
  void finished(std::size_t i, clock_duration latency, TimePoint now) noexcept {
    if (i >= size_) return;
    observe(i, latency, now);
    ended(i);
    slots_[i].failures = 0;
  }

  /// A request to `i` ended with nothing learnt of the address's latency
  /// (cancelled, or cut short by a failure that failed() reports): it is
  /// no longer in flight.
  /// A probe that ends so leaves the estimate as it was (the next comes
  /// after another resample_after requests to the others).
  void ended(std::size_t i) noexcept {
    if (i >= size_) return;
    slot& s = slots_[i];
    if (s.outstanding > 0) --s.outstanding;
    if (s.outstanding == 0) s.probing = false;
  }

  /// A connection to `i` or a request on one failed at `now` after `took`
  /// without an answer (a connect refused, unreachable or timed out; an
  /// attempt out of time or reset): a sample of at least failure_penalty,
  /// which the peak rule takes at once, outside any request's count. It
  /// counts (decaying) for the hold: failure_hold after the first failure
  /// in a row, twice as long after each next one (a failure while held, of
  /// a request sent before, counts as the same one and ends the hold at
  /// most that long after it), at most failure_hold_max. When the hold
  /// ends the address is as if it had no sample, its slow start beginning
  /// then.
  void failed(std::size_t i, clock_duration took, TimePoint now) noexcept {
    if (i >= size_) return;
    const auto floor = std::chrono::duration_cast<clock_duration>(options_.failure_penalty);
    observe(i, std::max(took, floor), now);
    if (options_.failure_hold.count() <= 0) return;
    slot& s = slots_[i];
    const bool held_now = holding(s, now);
    if (!held_now && s.failures < max_failures) ++s.failures;
    const TimePoint until = now + hold(s.failures);
    s.since = held_now ? std::max(s.since, until) : until;
    s.held = true;
    slow_until_ = std::max(slow_until_, s.since + window());
  }

  /// A latency sample of `i` at `now`, outside any request's count (a
  /// connection's set-up time, for one).
  void observe(std::size_t i, clock_duration latency, TimePoint now) noexcept {
    if (i >= size_) return;
    slot& s = slots_[i];
    const double x = std::max(0.0, static_cast<double>(std::chrono::nanoseconds(latency).count()));
    if (!known(s, now) || s.probing) {
      s.estimate_ns = x;
      s.held = false;
      s.probing = false;
    } else {
      const double w = recency(s, now);
      const double current = s.estimate_ns * w;
      s.estimate_ns = x > current ? x : current * w + x * (1.0 - w);
    }
    s.sampled = true;
    s.stamp = std::max(s.stamp, now);
  }

  /// The latency estimate of `i` at `now`, in nanoseconds (default_rtt
  /// before its first sample).
  double estimate(std::size_t i, TimePoint now) const noexcept {
    if (i >= size_) return 0;
    const slot& s = slots_[i];
    return known(s, now) ? s.estimate_ns * recency(s, now) : default_ns();
  }

  /// The cost of `i` at `now` (nanoseconds x requests): what a pick compares.
  double cost(std::size_t i, TimePoint now) const noexcept {
    if (i >= size_) return 0;
    const slot& s = slots_[i];
    if (untried(s, now)) return 0;
    const double n = static_cast<double>(s.outstanding) + 1.0;
    const double bias = options_.in_flight_bias;
    return estimate(i, now) * (bias == 0.5 ? std::sqrt(n) : bias == 1.0 ? n : std::pow(n, bias));
  }

  /// Requests in flight to `i`.
  unsigned outstanding(std::size_t i) const noexcept { return i < size_ ? slots_[i].outstanding : 0; }

  /// Whether `i` is held after a failure at `now` (see failed).
  bool held(std::size_t i, TimePoint now) const noexcept {
    return i < size_ && holding(slots_[i], now);
  }

  /// The slow-start weight of `i` at `now`, in (0, 1]: below 1 during its
  /// slow start (the least weight while it is held).
  double weight(std::size_t i, TimePoint now) const noexcept {
    return static_cast<double>(weight_units(i, now)) / static_cast<double>(full_weight);
  }

  /// The slot for the next request, among `candidates` (the address
  /// book's: the addresses not ejected), avoiding the slots in `avoid`
  /// (the operation's earlier attempts') while a candidate outside it is
  /// left. None in first_to_connect mode (the caller keeps its own order)
  /// or when no candidate is a slot in use. Draws from `random` only when
  /// two or more candidates are left; const: picking changes nothing
  /// (started() says that the request went).
  template <uniform_draws Random>
  std::optional<std::size_t> pick(address_set candidates, address_set avoid, TimePoint now,
                                  Random& random) const {
    if (options_.mode == balance_mode::first_to_connect) return std::nullopt;
    address_set in = candidates & in_use();
    if (in == 0) return std::nullopt;
    if (const address_set preferred = in & ~avoid; preferred != 0) in = preferred;
    if ((in & (in - 1)) == 0) return static_cast<std::size_t>(std::countr_zero(in));
    // Two distinct slots, uniformly.
    const int n = std::popcount(in);
    const auto a = static_cast<int>(random.uniform(static_cast<std::uint64_t>(n - 1)));
    auto b = static_cast<int>(random.uniform(static_cast<std::uint64_t>(n - 2)));
    if (b >= a) ++b;
    const std::size_t first = nth_member(in, a);
    const std::size_t second = nth_member(in, b);
    const bool second_wins = cheaper(second, first, now);
    if (now < slow_until_) {
      // A winner lighter than the other (in its slow start) serves with
      // probability the ratio of their weights.
      const std::uint64_t won = weight_units(second_wins ? second : first, now);
      const std::uint64_t lost = weight_units(second_wins ? first : second, now);
      if (won < lost && random.uniform(lost - 1) >= won) return second_wins ? first : second;
    }
    return second_wins ? second : first;
  }

  const balancer_options& settings() const noexcept { return options_; }

private:
  struct slot {
    double estimate_ns = 0;       ///< as of `stamp`
    TimePoint stamp{};            ///< the latest sample's instant
    TimePoint since{};            ///< its slow start's beginning (its hold's end when held)
    unsigned outstanding = 0;     ///< requests in flight
    std::uint8_t failures = 0;    ///< failures in a row (failed), up to max_failures
    bool sampled = false;         ///< an answer has been seen since it (re)started
    bool held = false;            ///< failed: `estimate_ns` counts until `since`
    bool probing = false;         ///< a probe of a stale estimate is in flight (started)
    std::uint64_t last_start = 0; ///< starts_ after its latest request started (or it (re)started)
  };

  /// Failures in a row counted: enough to reach any hold's cap.
  static constexpr std::uint8_t max_failures = 64;

  /// Whether `s` has a sample that counts at `now`: one since it (re)started,
  /// and not one whose hold has ended.
  static bool known(const slot& s, TimePoint now) noexcept { return s.sampled && !(s.held && !holding(s, now)); }

  /// Whether `s` has a sample and no request started to it while
  /// resample_after started to the others (a hold keeps it).
  bool stale(const slot& s) const noexcept {
    return options_.resample_after != 0 && s.sampled && !s.held && starts_ - s.last_start >= options_.resample_after;
  }

  /// Whether `s` is to be tried at `now`: nothing in flight to it, and no
  /// sample that counts or a stale one. It costs nothing then.
  bool untried(const slot& s, TimePoint now) const noexcept {
    return s.outstanding == 0 && (!known(s, now) || stale(s));
  }

  /// Whether `s` is within a failure's hold at `now`.
  static bool holding(const slot& s, TimePoint now) noexcept { return s.held && now < s.since; }

  /// The hold after `failures` in a row: failure_hold doubled failures - 1
  /// times, at most failure_hold_max.
  clock_duration hold(unsigned failures) const noexcept {
    const auto most = std::chrono::duration_cast<clock_duration>(options_.failure_hold_max);
    auto h = std::chrono::duration_cast<clock_duration>(options_.failure_hold);
    for (unsigned k = 1; k < failures && h < most; ++k) h = h > most / 2 ? most : h * 2;
    return std::min(h, most);
  }

  slot fresh(TimePoint now) const noexcept {
    slot s;
    s.since = now;
    s.last_start = starts_;
    return s;
  }

  clock_duration window() const noexcept {
    return std::chrono::duration_cast<clock_duration>(options_.slow_start_window);
  }

  double default_ns() const noexcept { return static_cast<double>(options_.default_rtt.count()); }

  address_set in_use() const noexcept {
    return size_ >= max_balanced_addresses ? ~address_set{0} : (address_set{1} << size_) - 1;
  }

  /// exp(-elapsed / decay), elapsed from the slot's latest sample to `now`
  /// (none when `now` is earlier); 0 with no decay time.
  double recency(const slot& s, TimePoint now) const noexcept {
    if (options_.decay.count() <= 0) return 0;
    if (now <= s.stamp) return 1;
    const double elapsed = static_cast<double>(std::chrono::nanoseconds(now - s.stamp).count());
    return std::exp(-elapsed / static_cast<double>(options_.decay.count()));
  }

  std::uint64_t weight_units(std::size_t i, TimePoint now) const noexcept {
    if (i >= size_ || now >= slow_until_) return full_weight;
    const double window_ns = static_cast<double>(options_.slow_start_window.count());
    const clock_duration in_slow = now - slots_[i].since;
    if (window_ns <= 0 || in_slow >= window()) return full_weight;
    const double t = std::max(0.0, static_cast<double>(std::chrono::nanoseconds(in_slow).count())) / window_ns;
    const double ramp = options_.slow_start_aggression == 1.0 ? t : std::pow(t, 1.0 / options_.slow_start_aggression);
    const double w = std::clamp(ramp, options_.slow_start_min_weight, 1.0);
    return std::clamp<std::uint64_t>(static_cast<std::uint64_t>(w * static_cast<double>(full_weight)), 1,
                                     full_weight);
  }

  /// The slot of the n-th (from 0) member of `set`.
  static std::size_t nth_member(address_set set, int n) noexcept {
    for (; n > 0; --n) set &= set - 1;
    return static_cast<std::size_t>(std::countr_zero(set));
  }

  /// cost(b, now) < cost(a, now), with one exponential instead of two when
  /// both have samples: their decays differ by exp((elapsed_a - elapsed_b) / decay).
  bool cheaper(std::size_t b, std::size_t a, TimePoint now) const noexcept {
    const slot& x = slots_[b];
    const slot& y = slots_[a];
    // Their latencies now, up to a common factor.
    double lx, ly;
    if (!known(x, now) || !known(y, now) || stale(x) || stale(y) || options_.decay.count() <= 0) {
      lx = latency_part(b, now);
      ly = latency_part(a, now);
    } else {
      const auto elapsed = [now](const slot& s) {
        return now <= s.stamp ? 0.0 : static_cast<double>(std::chrono::nanoseconds(now - s.stamp).count());
      };
      lx = x.estimate_ns * std::exp((elapsed(y) - elapsed(x)) / static_cast<double>(options_.decay.count()));
      ly = y.estimate_ns;
    }
    return weighed(lx, x.outstanding) < weighed(ly, y.outstanding);
  }

  /// The latency part of the cost of `i`: 0 for an address to be tried
  /// (untried), else its estimate.
  double latency_part(std::size_t i, TimePoint now) const noexcept {
    return untried(slots_[i], now) ? 0.0 : estimate(i, now);
  }

  /// A value that orders as the cost latency x (in_flight + 1)^bias does:
  /// that cost raised to 1 / bias (a square for the default 0.5, no call).
  double weighed(double latency, unsigned in_flight) const noexcept {
    const double n = static_cast<double>(in_flight) + 1.0;
    const double bias = options_.in_flight_bias;
    if (bias == 0.5) return latency * latency * n;
    if (bias == 1.0) return latency * n;
    return std::pow(latency, 1.0 / bias) * n;
  }

  balancer_options options_;
  std::array<slot, max_balanced_addresses> slots_{};
  std::size_t size_ = 0;
  /// Requests started to any slot, ever (for stale).
  std::uint64_t starts_ = 0;
  /// No slot's slow start lasts past this: from then on every weight is full.
  TimePoint slow_until_{};
};

} // namespace coretry::http::detail

#endif
