#ifndef CORETRY_PROMETHEUS_HPP
#define CORETRY_PROMETHEUS_HPP

#include <coretry/budget.hpp>
#include <coretry/gate.hpp>
#include <coretry/latency_tracker.hpp>
#include <coretry/observer.hpp>

#include <array>
#include <atomic>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace coretry {

/// One label of a sample: its name and its value as it is (the writer
/// escapes the value).
struct prometheus_label {
  std::string_view name;
  std::string_view value;
};

/// Appends metric families to a string in the Prometheus text exposition
/// format (version 0.0.4): a family's HELP and TYPE lines, then its samples.
/// Every program that exposes metrics writes them through this one writer.
class prometheus_text_writer {
public:
  /// Appends to `out`, which must outlive the writer.
  explicit prometheus_text_writer(std::string& out) noexcept : out_(&out) {}

  /// "# HELP NAME HELP" and "# TYPE NAME TYPE" (the help text escaped).
  /// Throws std::invalid_argument for a name that is not a valid metric
  /// name, or a type other than counter, gauge, histogram, summary, untyped.
  void family(std::string_view name, std::string_view type, std::string_view help);

  /// "NAME{LABEL="VALUE",...} VALUE", or "NAME VALUE" without labels. Label
  /// values are escaped; names and label names are the caller's constants.
  template <std::integral T>
  void sample(std::string_view name, std::initializer_list<prometheus_label> labels, T value) {
    sample_text(name, labels, std::to_string(value));
  }
  /// A float value, with nine significant digits.
  void sample(std::string_view name, std::initializer_list<prometheus_label> labels, double value);
  /// A sample whose labels are built at run time (sample() takes a list
  /// written out in the call).
  void sample_with(std::string_view name, std::span<const prometheus_label> labels, std::string_view value);

  /// Escapes a label value for the text format (backslash, quote, newline).
  static std::string escape_label_value(std::string_view value);

private:
  void sample_text(std::string_view name, std::initializer_list<prometheus_label> labels, std::string_view value);
  std::string* out_;
};

/// A histogram of durations for the text format, with fixed buckets that
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
  /// Writes NAME_bucket{LABELS...,le="..."} (cumulative), NAME_sum{LABELS}
  /// in seconds and NAME_count{LABELS}; at most 7 labels. The family's
  /// HELP and TYPE lines are the caller's.
  void write(prometheus_text_writer& writer, std::string_view name, std::span<const prometheus_label> labels) const;

private:
  std::array<std::atomic<std::uint64_t>, bounds.size() + 1> buckets_{}; // the last: above 10 s
  std::atomic<std::int64_t> sum_ns_{0};
};

/// A retry_observer that keeps counters per route template and renders them
/// in the Prometheus text exposition format (version 0.0.4). Thread-safe:
/// every counter is a relaxed atomic, and no event takes a lock, so one
/// observer can be shared by all operations on all threads.
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
///                                              deadline), failure
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
class prometheus_observer final : public retry_observer {
public:
  static constexpr std::size_t max_categories_per_route = 16;

  /// `routes`: the bounded set of operation names (route templates).
  /// Throws std::invalid_argument for an empty or duplicate route, or a
  /// prefix that is not a valid metric name.
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

  void attempt_started(const attempt_started_event& e) noexcept override;
  void attempt_finished(const attempt_finished_event& e) noexcept override;
  void backoff_scheduled(const backoff_event& e) noexcept override;
  void stopped(const stop_event& e) noexcept override;

  /// Appends the exposition text (HELP and TYPE lines, then samples).
  void write(std::string& out) const;
  std::string text() const;

  /// Escapes a label value for the text format: the same as
  /// prometheus_text_writer::escape_label_value.
  static std::string escape_label_value(std::string_view value) {
    return prometheus_text_writer::escape_label_value(value);
  }

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
};

} // namespace coretry

#endif
