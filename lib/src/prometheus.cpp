#include <coretry/prometheus.hpp>

#include "prometheus_routes.hpp"

#include <prometheus/check_names.h>
#include <prometheus/client_metric.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <initializer_list>
#include <stdexcept>

namespace coretry {

namespace {
constexpr auto relaxed = std::memory_order_relaxed;
using counter = std::atomic<std::uint64_t>;
using ::prometheus::ClientMetric;
using ::prometheus::MetricFamily;
using ::prometheus::MetricType;

struct label {
  std::string_view name;
  std::string_view value;
};

/// Metric families being made for one collection: a family, then its
/// samples, each of the family's type.
class family_list {
public:
  explicit family_list(std::string_view prefix) : prefix_(prefix) {}

  void family(std::string_view name, MetricType type, std::string_view help) {
    MetricFamily f;
    f.name.reserve(prefix_.size() + name.size());
    f.name.append(prefix_).append(name);
    f.help = help;
    f.type = type;
    families_.push_back(std::move(f));
  }

  /// A counter's or gauge's value, by the current family's type.
  void sample(std::initializer_list<label> labels, double value) {
    ClientMetric& m = add(labels);
    if (families_.back().type == MetricType::Counter) m.counter.value = value;
    else m.gauge.value = value;
  }

  /// A histogram sample, for the caller to fill: cumulative buckets in
  /// ascending order of upper bound, without the +Inf one (the serializer
  /// writes the count as that bucket), the count and the sum.
  ClientMetric::Histogram& histogram(std::initializer_list<label> labels) { return add(labels).histogram; }

  std::vector<MetricFamily> take() { return std::move(families_); }

private:
  ClientMetric& add(std::initializer_list<label> labels) {
    ClientMetric m;
    m.label.reserve(labels.size());
    for (const auto& l : labels) m.label.push_back({std::string{l.name}, std::string{l.value}});
    families_.back().metric.push_back(std::move(m));
    return families_.back().metric.back();
  }

  std::string_view prefix_;
  std::vector<MetricFamily> families_;
};
} // namespace

void prometheus_duration_histogram::observe(duration d) noexcept {
  std::size_t i = 0;
  while (i < bounds.size() && d > bounds[i]) ++i;
  buckets_[i].fetch_add(1, relaxed);
  sum_ns_.fetch_add(std::max(d, duration::zero()).count(), relaxed);
}

std::uint64_t prometheus_duration_histogram::count() const noexcept {
  std::uint64_t n = 0;
  for (const auto& b : buckets_) n += b.load(relaxed);
  return n;
}

void prometheus_duration_histogram::collect(ClientMetric::Histogram& out) const {
  std::uint64_t cumulative = 0;
  out.bucket.reserve(bounds.size());
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    cumulative += buckets_[i].load(relaxed);
    out.bucket.push_back({cumulative, std::chrono::duration<double>(bounds[i]).count()});
  }
  cumulative += buckets_.back().load(relaxed);
  out.sample_count = cumulative; // the serializer writes it as the +Inf bucket too
  out.sample_sum = std::chrono::duration<double>(duration(sum_ns_.load(relaxed))).count();
}

struct prometheus_observer::route_counters {
  explicit route_counters(std::string n) : name(std::move(n)) {}
  ~route_counters() {
    for (auto& slot : categories) delete slot.name.load(relaxed);
  }

  struct category_slot {
    std::atomic<const std::string*> name{nullptr};
    counter count{0};
  };

  std::string name;
  counter operations{0}, attempts{0}, initial_successes{0}, final_successes{0}, cancellations{0}, backoffs{0};
  std::atomic<std::int64_t> backoff_ns{0};
  std::array<counter, retry_counters::attempt_buckets> per_operation{};
  std::array<counter, stop_reason_count> stops{};
  std::array<counter, hedge_result_count> hedges{}; // indexed by hedge_result
  std::atomic<std::int64_t> hedge_delay_ns{0};
  std::array<category_slot, max_categories_per_route> categories{};
  counter other_category{0};
  // Attempt durations by [latency_result][connection_use].
  std::array<std::array<prometheus_duration_histogram, 3>, 3> attempt_durations{};
  std::atomic<std::int64_t> limit_ns{0}; // 0: no attempt started yet
  counter permits_granted{0}, permits_refused{0};
  std::atomic<std::int64_t> permit_wait_ns{0};

  // Lock-free: a slot's name is published once, by compare-exchange.
  void count_failure(std::string_view category) noexcept {
    for (auto& slot : categories) {
      const std::string* seen = slot.name.load(std::memory_order_acquire);
      if (seen == nullptr) {
        const std::string* mine = nullptr;
        try {
          mine = new std::string(category);
        } catch (...) {
          break;
        }
        if (slot.name.compare_exchange_strong(seen, mine, std::memory_order_acq_rel)) {
          slot.count.fetch_add(1, relaxed);
          return;
        }
        delete mine; // another thread took the slot: `seen` is its name
      }
      if (*seen == category) {
        slot.count.fetch_add(1, relaxed);
        return;
      }
    }
    other_category.fetch_add(1, relaxed);
  }
};

prometheus_observer::prometheus_observer(std::vector<std::string> routes, std::string prefix)
    : prefix_(std::move(prefix)) {
  // Every family's name is the prefix and a valid suffix: checking one checks all.
  if (prefix_.empty() || !::prometheus::CheckMetricName(prefix_ + "_operations_total"))
    throw std::invalid_argument("metric prefix '" + prefix_ + "' is not a valid name");
  detail::check_routes(routes);
  for (auto& route : routes) routes_.push_back(std::make_unique<route_counters>(std::move(route)));
  routes_.push_back(std::make_unique<route_counters>("other"));
}

prometheus_observer::~prometheus_observer() = default;

void prometheus_observer::watch_budget(std::string dependency, const token_bucket_budget& budget) {
  budgets_.push_back({std::move(dependency), &budget, nullptr});
}

void prometheus_observer::watch_budget(std::string dependency, const leased_budget& budget) {
  budgets_.push_back({std::move(dependency), nullptr, &budget});
}

void prometheus_observer::watch_limit(std::string dependency, const concurrency_limit& limit) {
  limits_.push_back({std::move(dependency), &limit});
}

void prometheus_observer::watch_gate(std::string dependency, const local_gate& gate) {
  gates_.push_back({std::move(dependency), &gate});
}

prometheus_observer::route_counters& prometheus_observer::find(std::string_view route) noexcept {
  return detail::find_route(routes_, route);
}

void prometheus_observer::attempt_started(const attempt_started_event& e) noexcept {
  route_counters& r = find(e.operation);
  r.attempts.fetch_add(1, relaxed);
  if (e.attempt == 1) r.operations.fetch_add(1, relaxed);
  const duration limit = e.limit == duration::max() || e.limit <= duration::zero() ? e.allowance : e.limit;
  r.limit_ns.store(std::max(limit.count(), duration::rep{1}), relaxed);
}

void prometheus_observer::attempt_finished(const attempt_finished_event& e) noexcept {
  route_counters& r = find(e.operation);
  r.attempt_durations[static_cast<std::size_t>(latency_result_of(e.record))]
                     [static_cast<std::size_t>(e.record.connection)]
                         .observe(e.record.end - e.record.start);
  if (e.record.superseded) return; // a hedging loser, ended because another attempt won
  if (e.record.classified.status == attempt_status::success) {
    if (e.record.number == 1) r.initial_successes.fetch_add(1, relaxed);
    return;
  }
  r.count_failure(e.record.classified.category);
}

void prometheus_observer::backoff_scheduled(const backoff_event& e) noexcept {
  route_counters& r = find(e.operation);
  r.backoffs.fetch_add(1, relaxed);
  r.backoff_ns.fetch_add(e.wait.count(), relaxed);
}

void prometheus_observer::hedge(const hedge_event& e) noexcept {
  route_counters& r = find(e.operation);
  r.hedges[static_cast<std::size_t>(e.result)].fetch_add(1, relaxed);
  r.hedge_delay_ns.store(e.delay.count(), relaxed);
}

void prometheus_observer::permit_waited(const permit_wait_event& e) noexcept {
  route_counters& r = find(e.operation);
  (e.granted ? r.permits_granted : r.permits_refused).fetch_add(1, relaxed);
  r.permit_wait_ns.fetch_add(e.waited.count(), relaxed);
}

void prometheus_observer::stopped(const stop_event& e) noexcept {
  route_counters& r = find(e.operation);
  r.stops[static_cast<std::size_t>(e.reason)].fetch_add(1, relaxed);
  if (e.reason == stop_reason::succeeded) r.final_successes.fetch_add(1, relaxed);
  if (e.reason == stop_reason::cancelled) r.cancellations.fetch_add(1, relaxed);
  if (e.attempts == 0) { // stopped before its first attempt: counted through its stop
    r.operations.fetch_add(1, relaxed);
    return;
  }
  r.per_operation[std::min<std::size_t>(e.attempts, retry_counters::attempt_buckets) - 1].fetch_add(1, relaxed);
}

std::vector<MetricFamily> prometheus_observer::Collect() const {
  family_list out{prefix_};
  const auto simple = [&](std::string_view name, std::string_view help, const counter route_counters::*member) {
    out.family(name, MetricType::Counter, help);
    for (const auto& r : routes_) out.sample({{"route", r->name}}, static_cast<double>(((*r).*member).load(relaxed)));
  };

  simple("_operations_total", "Logical operations started.", &route_counters::operations);
  simple("_attempts_total", "Attempts started, the first included.", &route_counters::attempts);
  simple("_initial_successes_total", "Operations whose first attempt succeeded.", &route_counters::initial_successes);
  simple("_successes_total", "Operations that ended in success.", &route_counters::final_successes);

  out.family("_attempt_failures_total", MetricType::Counter, "Failed attempts by failure category.");
  for (const auto& r : routes_) {
    for (const auto& slot : r->categories) {
      const std::string* name = slot.name.load(std::memory_order_acquire);
      if (name == nullptr) break;
      out.sample({{"route", r->name}, {"category", *name}}, static_cast<double>(slot.count.load(relaxed)));
    }
    const std::uint64_t other = r->other_category.load(relaxed);
    if (other != 0) out.sample({{"route", r->name}, {"category", "other"}}, static_cast<double>(other));
  }

  out.family("_attempts_per_operation", MetricType::Histogram, "Attempts each finished operation made.");
  for (const auto& r : routes_) {
    ClientMetric::Histogram& h = out.histogram({{"route", r->name}});
    std::uint64_t cumulative = 0, sum = 0;
    for (std::size_t i = 0; i < r->per_operation.size(); ++i) {
      const std::uint64_t n = r->per_operation[i].load(relaxed);
      cumulative += n;
      sum += n * (i + 1); // the last bucket counts 10 or more as 10
      if (i + 1 < r->per_operation.size()) h.bucket.push_back({cumulative, static_cast<double>(i + 1)});
    }
    h.sample_count = cumulative; // the serializer writes it as the +Inf bucket too
    h.sample_sum = static_cast<double>(sum);
  }

  simple("_backoffs_total", "Sleeps scheduled between attempts.", &route_counters::backoffs);
  out.family("_backoff_seconds_total", MetricType::Counter, "Time scheduled for sleeping between attempts.");
  for (const auto& r : routes_)
    out.sample({{"route", r->name}}, std::chrono::duration<double>(duration(r->backoff_ns.load(relaxed))).count());
  simple("_cancellations_total", "Operations cancelled by their caller.", &route_counters::cancellations);

  out.family("_stops_total", MetricType::Counter, "Operations stopped, by stop reason.");
  for (const auto& r : routes_)
    for (int i = 0; i < stop_reason_count; ++i)
      out.sample({{"route", r->name}, {"reason", to_string(static_cast<stop_reason>(i))}},
                 static_cast<double>(r->stops[static_cast<std::size_t>(i)].load(relaxed)));

  out.family("_hedges_total", MetricType::Counter,
             "Hedges (backup attempts while an earlier one runs): sent, won, refused_budget, refused_gate, "
             "refused_limit.");
  for (const auto& r : routes_)
    for (hedge_result h : {hedge_result::sent, hedge_result::won, hedge_result::refused_budget,
                           hedge_result::refused_gate, hedge_result::refused_limit})
      out.sample({{"route", r->name}, {"result", to_string(h)}},
                 static_cast<double>(r->hedges[static_cast<std::size_t>(h)].load(relaxed)));
  out.family("_hedge_delay_seconds", MetricType::Gauge,
             "The hedging delay in force at the route's latest hedge event (0 before any).");
  for (const auto& r : routes_)
    out.sample({{"route", r->name}}, std::chrono::duration<double>(duration(r->hedge_delay_ns.load(relaxed))).count());

  out.family("_attempt_duration_seconds", MetricType::Histogram,
             "How long each attempt took, by result: success, timeout (at its deadline), failure; for an "
             "attempt with a connection (HTTP), also by connection: new or reused.");
  // Attempts without a connection have no connection label, and are always
  // shown; the new and reused series appear with their first attempt.
  for (const auto& r : routes_)
    for (const latency_result result : {latency_result::success, latency_result::timeout, latency_result::failure}) {
      const auto& by_connection = r->attempt_durations[static_cast<std::size_t>(result)];
      by_connection[static_cast<std::size_t>(connection_use::none)].collect(
          out.histogram({{"route", r->name}, {"result", to_string(result)}}));
      for (const connection_use use : {connection_use::fresh, connection_use::reused}) {
        const auto& h = by_connection[static_cast<std::size_t>(use)];
        if (h.count() > 0)
          h.collect(out.histogram({{"route", r->name}, {"result", to_string(result)}, {"connection", to_string(use)}}));
      }
    }
  out.family("_permit_waits_total", MetricType::Counter,
             "Waits for a concurrency limit's permit, by result: granted, refused (none came in time).");
  for (const auto& r : routes_) {
    out.sample({{"route", r->name}, {"result", "granted"}}, static_cast<double>(r->permits_granted.load(relaxed)));
    out.sample({{"route", r->name}, {"result", "refused"}}, static_cast<double>(r->permits_refused.load(relaxed)));
  }
  out.family("_permit_wait_seconds_total", MetricType::Counter, "Time spent waiting for a concurrency limit's permits.");
  for (const auto& r : routes_)
    out.sample({{"route", r->name}}, std::chrono::duration<double>(duration(r->permit_wait_ns.load(relaxed))).count());
  out.family("_attempt_limit_seconds", MetricType::Gauge,
             "Limit of the route's latest attempt, before the clamp to the remaining time.");
  for (const auto& r : routes_) {
    const std::int64_t ns = r->limit_ns.load(relaxed);
    if (ns != 0) out.sample({{"route", r->name}}, std::chrono::duration<double>(duration(ns)).count());
  }

  if (!budgets_.empty()) {
    out.family("_budget_tokens", MetricType::Gauge, "Retry tokens left in the dependency's budget.");
    for (const auto& b : budgets_) {
      const double tokens = b.bucket                ? b.bucket->tokens()
                            : b.leased->shared()    ? static_cast<double>(b.leased->leased())
                                                    : b.leased->local_tokens();
      out.sample({{"dependency", b.dependency}}, tokens);
    }
    out.family("_budget_capacity", MetricType::Gauge, "Capacity of the dependency's retry budget.");
    for (const auto& b : budgets_)
      out.sample({{"dependency", b.dependency}}, b.bucket ? b.bucket->capacity() : b.leased->settings().capacity);
  }
  if (!gates_.empty()) {
    out.family("_gate_open", MetricType::Gauge,
               "1 while the dependency's retry gate admits every retry, 0 while it holds them.");
    for (const auto& g : gates_) out.sample({{"dependency", g.dependency}}, g.gate->is_open() ? 1 : 0);
    out.family("_gate_level", MetricType::Gauge, "Slow-start level of the dependency's retry gate while it holds retries.");
    for (const auto& g : gates_) out.sample({{"dependency", g.dependency}}, static_cast<double>(g.gate->level()));
    out.family("_gate_answers_total", MetricType::Counter,
               "Answers of the dependency's retry gate: admitted, probe (admitted while not open), held, denied, "
               "throttled (first attempts rejected).");
    for (const auto& g : gates_) {
      const auto a = g.gate->counts();
      const auto answer = [&](std::string_view name, std::uint64_t n) {
        out.sample({{"dependency", g.dependency}, {"answer", name}}, static_cast<double>(n));
      };
      answer("admitted", a.admitted);
      answer("probe", a.probes);
      answer("held", a.held);
      answer("denied", a.denied);
      answer("throttled", a.throttled);
    }
  }
  if (!limits_.empty()) {
    out.family("_concurrency_limit", MetricType::Gauge, "Attempts the dependency's concurrency limit lets run at once.");
    for (const auto& l : limits_) out.sample({{"dependency", l.dependency}}, static_cast<double>(l.limit->limit()));
    out.family("_concurrency_in_flight", MetricType::Gauge, "Permits of the dependency's concurrency limit held now.");
    for (const auto& l : limits_) out.sample({{"dependency", l.dependency}}, static_cast<double>(l.limit->in_flight()));
    out.family("_concurrency_waiting", MetricType::Gauge, "Attempts waiting for a permit of the dependency's limit.");
    for (const auto& l : limits_) out.sample({{"dependency", l.dependency}}, static_cast<double>(l.limit->waiting()));
    out.family("_concurrency_permits_total", MetricType::Counter,
               "Permits of the dependency's concurrency limit: acquired, waited (joined the queue), refused.");
    for (const auto& l : limits_) {
      const concurrency_limit::counts n = l.limit->totals();
      out.sample({{"dependency", l.dependency}, {"result", "acquired"}}, static_cast<double>(n.acquired));
      out.sample({{"dependency", l.dependency}, {"result", "waited"}}, static_cast<double>(n.waited));
      out.sample({{"dependency", l.dependency}, {"result", "refused"}}, static_cast<double>(n.refused));
    }
  }
  return out.take();
}

void prometheus_observer::write(std::string& out) const { out += ::prometheus::TextSerializer{}.Serialize(Collect()); }

std::string prometheus_observer::text() const {
  std::string out;
  write(out);
  return out;
}

} // namespace coretry
