#ifndef CORETRY_PROMETHEUS_HPP
#define CORETRY_PROMETHEUS_HPP

#include <coretry/budget.hpp>
#include <coretry/concurrency_limit.hpp>
#include <coretry/gate.hpp>
#include <coretry/latency_tracker.hpp>
#include <coretry/observer.hpp>

#include <prometheus/client_metric.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace coretry {

/// A histogram of durations, with fixed buckets that
/// resolve 1 ms to 10 s in 1-2-5 steps (le 0.001 ... 10 seconds, +Inf).
/// Recording is lock-free and allocation-free (a scan of 13 bounds, two
/// relaxed atomic adds). Each series with its own labels is one of these:
/// the attempt durations keep one per route and result, and a new label
/// (an HTTP connection's "new" or "reused", a phase) is one more index.
class prometheus_duration_histogram {
public:
  /// Upper bounds of the finite buckets.
  static constexpr std::array<duration, 13> bounds{
      std::chrono::milliseconds(1),   std::chrono::milliseconds(2),   std::chrono::milliseconds(5),
      std::chrono::milliseconds(10),  std::chrono::milliseconds(20),  std::chrono::milliseconds(50),
      std::chrono::milliseconds(100), std::chrono::milliseconds(200), std::chrono::milliseconds(500),
      std::chrono::seconds(1),        std::chrono::seconds(2),        std::chrono::seconds(5),
      std::chrono::seconds(10)};

  /// Counts `d` (negative counts as zero).
  void observe(duration d) noexcept;
  /// Observations so far.
  std::uint64_t count() const noexcept;
  /// The cumulative buckets (seconds), the sum in seconds and the count, as
  /// one sample of a prometheus-cpp histogram family.
  void collect(::prometheus::ClientMetric::Histogram& out) const;

private:
  std::array<std::atomic<std::uint64_t>, bounds.size() + 1> buckets_{}; // the last: above 10 s
  std::atomic<std::int64_t> sum_ns_{0};
};

/// A retry_observer that keeps counters per route template, and a
/// prometheus-cpp Collectable that hands them over as metric families: a
/// server registers it with its own prometheus::Exposer (RegisterCollectable)
/// or serializes Collect() beside its own registry's families. Thread-safe:
/// every counter is a relaxed atomic, and no event takes a lock or allocates
/// (but the first sight of a failure category, once per slot), so one
/// observer can be shared by all operations on all threads. The families are
/// made from those atomics when collected: prometheus-cpp's own Family::Add
/// takes a lock and allocates for each new label set, which the record path
/// must not.
///
/// Labels come only from bounded sets:
///  - `route`: one of the route templates given at construction (an event
///    for any other operation name is counted under "other");
///  - `category`: the verdict's category of a failed attempt (string
///    literals such as "http_503", "timeout"); the first
///    `max_categories_per_route` distinct ones get their own series, any
///    further ones are counted under "other";
///  - `reason`: a stop_reason.
///
/// Series (with the default prefix "coretry"):
///   coretry_operations_total{route}            logical operations
///   coretry_attempts_total{route}              attempts started
///   coretry_initial_successes_total{route}     operations whose first attempt succeeded
///   coretry_successes_total{route}             operations that ended in success
///   coretry_attempt_failures_total{route,category}
///   coretry_attempts_per_operation{route,le}   histogram (buckets 1..9, +Inf)
///   coretry_backoffs_total{route}              sleeps between attempts (a retry gate's waits included)
///   coretry_backoff_seconds_total{route}       time slept (scheduled) between attempts
///   coretry_cancellations_total{route}
///   coretry_stops_total{route,reason}          every reason, zeros included
///   coretry_attempt_duration_seconds{route,result}  histogram (1 ms to 10 s): how long each
///                                              attempt took, by result: success, timeout (at its
///                                              deadline), failure; for an attempt with a connection
///                                              (HTTP) also connection: new or reused
///   coretry_attempt_limit_seconds{route}       gauge: the limit of the route's latest attempt
///                                              (attempt_started_event::limit; its allowance when
///                                              the limit has no bound), once an attempt started
///   coretry_budget_tokens{dependency}          gauge, per watched budget
///   coretry_budget_capacity{dependency}        gauge
///   coretry_gate_open{dependency}              gauge, per watched gate: 1 open, 0 holding retries
///   coretry_gate_level{dependency}             gauge: the slow-start level while holding retries
///   coretry_gate_answers_total{dependency,answer}  counter: admitted, probe (admitted while
///                                              not open), held (told to wait), denied,
///                                              throttled (first attempts rejected)
///   coretry_permit_waits_total{route,result}   waits for a concurrency limit's permit: granted, refused
///   coretry_permit_wait_seconds_total{route}   time spent waiting for permits
///   coretry_concurrency_limit{dependency}      gauge, per watched concurrency limit: the limit in force
///   coretry_concurrency_in_flight{dependency}  gauge: permits held (attempts in flight)
///   coretry_concurrency_waiting{dependency}    gauge: attempts waiting for a permit
///   coretry_concurrency_permits_total{dependency,result}  counter: acquired, waited (joined the
///                                              queue), refused
class prometheus_observer final : public retry_observer, public ::prometheus::Collectable {
public:
  static constexpr std::size_t max_categories_per_route = 16;

  /// `routes`: the bounded set of operation names (route templates).
  /// Throws std::invalid_argument for an empty or duplicate route, or a
  /// prefix that does not make valid metric names.
  explicit prometheus_observer(std::vector<std::string> routes, std::string prefix = "coretry");
  ~prometheus_observer() override;
  prometheus_observer(const prometheus_observer&) = delete;
  prometheus_observer& operator=(const prometheus_observer&) = delete;

  /// Reports `budget`'s tokens as a gauge labelled dependency="NAME". Call
  /// before the observer is shared (not thread-safe); the budget must outlive
  /// the observer's renderings.
  void watch_budget(std::string dependency, const token_bucket_budget& budget);
  /// Reports a fleet budget's tokens this process may spend now (leased
  /// while shared, its own bucket's while local) and the bucket's capacity,
  /// as watch_budget does.
  void watch_budget(std::string dependency, const leased_budget& budget);
  /// Reports whether `gate` is open, and its slow-start level, as gauges
  /// labelled dependency="NAME". Call before the observer is shared (not
  /// thread-safe); the gate must outlive the observer's renderings.
  void watch_gate(std::string dependency, const local_gate& gate);
  /// Reports `limit`'s limit, permits held, waiters and counts, labelled
  /// dependency="NAME". Call before the observer is shared (not
  /// thread-safe); the limit must outlive the observer's renderings.
  void watch_limit(std::string dependency, const concurrency_limit& limit);

  void attempt_started(const attempt_started_event& e) noexcept override;
  void attempt_finished(const attempt_finished_event& e) noexcept override;
  void backoff_scheduled(const backoff_event& e) noexcept override;
  void hedge(const hedge_event& e) noexcept override;
  void permit_waited(const permit_wait_event& e) noexcept override;
  void stopped(const stop_event& e) noexcept override;

  /// Every family, with the same names, labels and types as the text.
  std::vector<::prometheus::MetricFamily> Collect() const override;

  /// Appends the exposition text (prometheus::TextSerializer of Collect()).
  void write(std::string& out) const;
  std::string text() const;

private:
  struct route_counters;
  route_counters& find(std::string_view route) noexcept;

  std::string prefix_;
  std::vector<std::unique_ptr<route_counters>> routes_; // the last one is "other"
  struct watched_budget {
    std::string dependency;
    const token_bucket_budget* bucket;
    const leased_budget* leased;
  };
  std::vector<watched_budget> budgets_;
  struct watched_gate {
    std::string dependency;
    const local_gate* gate;
  };
  std::vector<watched_gate> gates_;
  struct watched_limit {
    std::string dependency;
    const concurrency_limit* limit;
  };
  std::vector<watched_limit> limits_;
};

} // namespace coretry

#endif
