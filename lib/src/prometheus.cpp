#include <coretry/prometheus.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

namespace coretry {

namespace {
constexpr auto relaxed = std::memory_order_relaxed;
using counter = std::atomic<std::uint64_t>;

bool valid_metric_name(std::string_view name) {
  if (name.empty()) return false;
  const auto ok = [](char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (!first && c >= '0' && c <= '9');
  };
  if (!ok(name.front(), true)) return false;
  return std::all_of(name.begin() + 1, name.end(), [&](char c) { return ok(c, false); });
}

// Prometheus wants a float; nine significant digits are plenty for counts of seconds and tokens.
std::string format_double(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.9g", value);
  return buffer;
}
} // namespace

void prometheus_text_writer::family(std::string_view name, std::string_view type, std::string_view help) {
  if (!valid_metric_name(name))
    throw std::invalid_argument("metric name '" + std::string{name} + "' is not a valid name");
  constexpr std::array<std::string_view, 5> types{"counter", "gauge", "histogram", "summary", "untyped"};
  if (std::find(types.begin(), types.end(), type) == types.end())
    throw std::invalid_argument("metric type '" + std::string{type} + "' is not one of counter, gauge, histogram, "
                                "summary, untyped");
  std::string& out = *out_;
  out.append("# HELP ").append(name).append(" ");
  for (const char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  out.append("\n# TYPE ").append(name).append(" ").append(type).append("\n");
}

void prometheus_text_writer::sample(std::string_view name, std::initializer_list<prometheus_label> labels,
                                    double value) {
  sample_text(name, labels, format_double(value));
}

void prometheus_text_writer::sample_text(std::string_view name, std::initializer_list<prometheus_label> labels,
                                         std::string_view value) {
  sample_with(name, std::span<const prometheus_label>(labels.begin(), labels.size()), value);
}

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

void prometheus_duration_histogram::write(prometheus_text_writer& writer, std::string_view name,
                                          std::span<const prometheus_label> labels) const {
  static constexpr std::array<std::string_view, bounds.size() + 1> le{
      "0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1", "2", "5", "10", "+Inf"};
  constexpr std::size_t max_labels = 7;
  std::array<prometheus_label, max_labels + 1> with_le{};
  const std::size_t n = std::min(labels.size(), max_labels);
  std::copy_n(labels.begin(), n, with_le.begin());
  const std::string bucket = std::string(name) + "_bucket";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    cumulative += buckets_[i].load(relaxed);
    with_le[n] = {"le", le[i]};
    writer.sample_with(bucket, std::span<const prometheus_label>(with_le.data(), n + 1), std::to_string(cumulative));
  }
  const std::span<const prometheus_label> own(with_le.data(), n);
  writer.sample_with(std::string(name) + "_sum", own,
                     format_double(std::chrono::duration<double>(duration(sum_ns_.load(relaxed))).count()));
  writer.sample_with(std::string(name) + "_count", own, std::to_string(cumulative));
}

void prometheus_text_writer::sample_with(std::string_view name, std::span<const prometheus_label> labels,
                                         std::string_view value) {
  std::string& out = *out_;
  out.append(name);
  if (!labels.empty()) {
    char separator = '{';
    for (const auto& label : labels) {
      out += separator;
      out.append(label.name).append("=\"").append(escape_label_value(label.value)).append("\"");
      separator = ',';
    }
    out += '}';
  }
  out.append(" ").append(value).append("\n");
}

std::string prometheus_text_writer::escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
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
  std::array<category_slot, max_categories_per_route> categories{};
  counter other_category{0};
  // Attempt durations by latency_result. (An HTTP connection label would
  // make this [result][connection], the index taken from the record.)
  std::array<prometheus_duration_histogram, 3> attempt_durations{};
  std::atomic<std::int64_t> limit_ns{0}; // 0: no attempt started yet

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
  if (!valid_metric_name(prefix_)) throw std::invalid_argument("metric prefix '" + prefix_ + "' is not a valid name");
  for (auto& route : routes) {
    if (route.empty()) throw std::invalid_argument("a route template may not be empty");
    if (route == "other") throw std::invalid_argument("route 'other' is reserved for unknown operations");
    for (const auto& known : routes_)
      if (known->name == route) throw std::invalid_argument("route '" + route + "' is given twice");
    routes_.push_back(std::make_unique<route_counters>(std::move(route)));
  }
  routes_.push_back(std::make_unique<route_counters>("other"));
}

prometheus_observer::~prometheus_observer() = default;

void prometheus_observer::watch_budget(std::string dependency, const token_bucket_budget& budget) {
  budgets_.push_back({std::move(dependency), &budget, nullptr});
}

void prometheus_observer::watch_budget(std::string dependency, const leased_budget& budget) {
  budgets_.push_back({std::move(dependency), nullptr, &budget});
}

void prometheus_observer::watch_gate(std::string dependency, const local_gate& gate) {
  gates_.push_back({std::move(dependency), &gate});
}

prometheus_observer::route_counters& prometheus_observer::find(std::string_view route) noexcept {
  // Few routes: a linear scan beats hashing and needs no lock.
  for (std::size_t i = 0; i + 1 < routes_.size(); ++i)
    if (routes_[i]->name == route) return *routes_[i];
  return *routes_.back();
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
  r.attempt_durations[static_cast<std::size_t>(latency_result_of(e.record))].observe(e.record.end - e.record.start);
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

void prometheus_observer::write(std::string& out) const {
  prometheus_text_writer writer{out};
  const auto header = [&](std::string_view name, std::string_view type, std::string_view help) {
    writer.family(prefix_ + std::string{name}, type, help);
  };
  const auto sample = [&](std::string_view name, std::initializer_list<prometheus_label> labels, auto value) {
    writer.sample(prefix_ + std::string{name}, labels, value);
  };
  const auto simple = [&](std::string_view name, std::string_view help, const counter route_counters::*member) {
    header(name, "counter", help);
    for (const auto& r : routes_) sample(name, {{"route", r->name}}, ((*r).*member).load(relaxed));
  };

  simple("_operations_total", "Logical operations started.", &route_counters::operations);
  simple("_attempts_total", "Attempts started, the first included.", &route_counters::attempts);
  simple("_initial_successes_total", "Operations whose first attempt succeeded.", &route_counters::initial_successes);
  simple("_successes_total", "Operations that ended in success.", &route_counters::final_successes);

  header("_attempt_failures_total", "counter", "Failed attempts by failure category.");
  for (const auto& r : routes_) {
    for (const auto& slot : r->categories) {
      const std::string* name = slot.name.load(std::memory_order_acquire);
      if (name == nullptr) break;
      sample("_attempt_failures_total", {{"route", r->name}, {"category", *name}}, slot.count.load(relaxed));
    }
    const std::uint64_t other = r->other_category.load(relaxed);
    if (other != 0) sample("_attempt_failures_total", {{"route", r->name}, {"category", "other"}}, other);
  }

  header("_attempts_per_operation", "histogram", "Attempts each finished operation made.");
  for (const auto& r : routes_) {
    std::uint64_t cumulative = 0, sum = 0;
    for (std::size_t i = 0; i < r->per_operation.size(); ++i) {
      const std::uint64_t n = r->per_operation[i].load(relaxed);
      cumulative += n;
      sum += n * (i + 1); // the last bucket counts 10 or more as 10
      const std::string le = i + 1 == r->per_operation.size() ? "+Inf" : std::to_string(i + 1);
      sample("_attempts_per_operation_bucket", {{"route", r->name}, {"le", le}}, cumulative);
    }
    sample("_attempts_per_operation_sum", {{"route", r->name}}, sum);
    sample("_attempts_per_operation_count", {{"route", r->name}}, cumulative);
  }

  simple("_backoffs_total", "Sleeps scheduled between attempts.", &route_counters::backoffs);
  header("_backoff_seconds_total", "counter", "Time scheduled for sleeping between attempts.");
  for (const auto& r : routes_)
    sample("_backoff_seconds_total", {{"route", r->name}},
           std::chrono::duration<double>(duration(r->backoff_ns.load(relaxed))).count());
  simple("_cancellations_total", "Operations cancelled by their caller.", &route_counters::cancellations);

  header("_stops_total", "counter", "Operations stopped, by stop reason.");
  for (const auto& r : routes_)
    for (int i = 0; i < stop_reason_count; ++i)
      sample("_stops_total", {{"route", r->name}, {"reason", to_string(static_cast<stop_reason>(i))}},
             r->stops[static_cast<std::size_t>(i)].load(relaxed));

  header("_attempt_duration_seconds", "histogram",
         "How long each attempt took, by result: success, timeout (at its deadline), failure.");
  for (const auto& r : routes_)
    for (const latency_result result : {latency_result::success, latency_result::timeout, latency_result::failure}) {
      const prometheus_label labels[] = {{"route", r->name}, {"result", to_string(result)}};
      r->attempt_durations[static_cast<std::size_t>(result)].write(writer, prefix_ + "_attempt_duration_seconds",
                                                                   labels);
    }
  header("_attempt_limit_seconds", "gauge",
         "Limit of the route's latest attempt, before the clamp to the remaining time.");
  for (const auto& r : routes_) {
    const std::int64_t ns = r->limit_ns.load(relaxed);
    if (ns != 0) sample("_attempt_limit_seconds", {{"route", r->name}}, std::chrono::duration<double>(duration(ns)).count());
  }

  if (!budgets_.empty()) {
    header("_budget_tokens", "gauge", "Retry tokens left in the dependency's budget.");
    for (const auto& b : budgets_) {
      const double tokens = b.bucket                ? b.bucket->tokens()
                            : b.leased->shared()    ? static_cast<double>(b.leased->leased())
                                                    : b.leased->local_tokens();
      sample("_budget_tokens", {{"dependency", b.dependency}}, tokens);
    }
    header("_budget_capacity", "gauge", "Capacity of the dependency's retry budget.");
    for (const auto& b : budgets_)
      sample("_budget_capacity", {{"dependency", b.dependency}},
             b.bucket ? b.bucket->capacity() : b.leased->settings().capacity);
  }
  if (!gates_.empty()) {
    header("_gate_open", "gauge", "1 while the dependency's retry gate admits every retry, 0 while it holds them.");
    for (const auto& g : gates_) sample("_gate_open", {{"dependency", g.dependency}}, g.gate->is_open() ? 1 : 0);
    header("_gate_level", "gauge", "Slow-start level of the dependency's retry gate while it holds retries.");
    for (const auto& g : gates_) sample("_gate_level", {{"dependency", g.dependency}}, g.gate->level());
    header("_gate_answers_total", "counter",
           "Answers of the dependency's retry gate: admitted, probe (admitted while not open), held, denied, "
           "throttled (first attempts rejected).");
    for (const auto& g : gates_) {
      const auto a = g.gate->counts();
      sample("_gate_answers_total", {{"dependency", g.dependency}, {"answer", "admitted"}}, a.admitted);
      sample("_gate_answers_total", {{"dependency", g.dependency}, {"answer", "probe"}}, a.probes);
      sample("_gate_answers_total", {{"dependency", g.dependency}, {"answer", "held"}}, a.held);
      sample("_gate_answers_total", {{"dependency", g.dependency}, {"answer", "denied"}}, a.denied);
      sample("_gate_answers_total", {{"dependency", g.dependency}, {"answer", "throttled"}}, a.throttled);
    }
  }
}

std::string prometheus_observer::text() const {
  std::string out;
  write(out);
  return out;
}

} // namespace coretry
