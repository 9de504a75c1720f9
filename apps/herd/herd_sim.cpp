#include "herd/herd_sim.hpp"

#include "herd/fleet_store.hpp"

#include <coretry/async_retry.hpp>
#include <coretry/budget.hpp>
#include <coretry/classify.hpp>
#include <coretry/gate.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <numbers>

namespace herd {
namespace {

namespace asio = boost::asio;
using coretry::testing::manual_clock;
using coretry::testing::manual_runner;
using coretry::testing::manual_timer;
using coretry::testing::seeded_random;

/// A double uniform in (0, 1), from 53 random bits.
double unit_interval(seeded_random& random) {
  constexpr std::uint64_t top = (std::uint64_t{1} << 53) - 1;
  return (static_cast<double>(random.uniform(top)) + 0.5) / static_cast<double>(top + 1);
}

/// One-way network delays, |Normal(mean, sd)|, by Box-Muller over seeded_random
/// (not std::normal_distribution, whose draws differ between standard libraries:
/// a seed must replay the same run everywhere).
class delay_source {
public:
  delay_source(network_model model, std::uint64_t seed) : model_(model), random_(seed) {}

  duration next() {
    double z;
    if (spare_) {
      z = *spare_;
      spare_.reset();
    } else {
      const double radius = std::sqrt(-2.0 * std::log(unit_interval(random_)));
      const double angle = 2.0 * std::numbers::pi * unit_interval(random_);
      z = radius * std::cos(angle);
      spare_ = radius * std::sin(angle);
    }
    const double ns = std::abs(static_cast<double>(model_.mean.count()) + z * static_cast<double>(model_.sd.count()));
    return duration(static_cast<duration::rep>(std::llround(ns)));
  }

private:
  network_model model_;
  seeded_random random_;
  std::optional<double> spare_;
};

std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// A process's gate as the clients see it: coretry::local_gate itself, with
/// the instants at which it admits a probe and first closes written down.
class observed_gate final : public coretry::retry_gate {
public:
  observed_gate(coretry::local_gate& gate, std::vector<duration>& probes, std::optional<duration>& closed)
      : gate_(gate), probes_(probes), closed_(closed) {}

  void record(coretry::attempt_status result, duration now) noexcept override {
    gate_.record(result, now);
    note(now);
  }
  coretry::gate_decision ask(duration now, duration latest, const coretry::gate_decision* held) noexcept override {
    const std::uint64_t before = gate_.counts().probes;
    const coretry::gate_decision d = gate_.ask(now, latest, held);
    if (gate_.counts().probes != before) probes_.push_back(now);
    note(now);
    return d;
  }
  void probe_ended(std::uint64_t ticket) noexcept override { gate_.probe_ended(ticket); }
  bool allow_first_attempt(duration now, coretry::random_source& random) override {
    return gate_.allow_first_attempt(now, random);
  }
  /// Writes down the first instant at which the gate is seen closed.
  void note(duration now) noexcept {
    if (!closed_ && !gate_.is_open()) closed_ = now;
  }

private:
  coretry::local_gate& gate_;
  std::vector<duration>& probes_;
  std::optional<duration>& closed_;
};

/// One process of the fleet: its budget and gate, and what its reconciler
/// last told the fleet's store.
struct process_state {
  std::optional<coretry::token_bucket_budget> bucket; // local
  std::optional<coretry::leased_budget> leased;       // shared
  std::optional<coretry::local_gate> gate;
  std::optional<observed_gate> observed;
  coretry::gate_model::counts published{}; // the gate's recorded() as last sent
  std::uint64_t openings = 0;              // the gate's openings() as last sent

  coretry::retry_budget* budget() {
    if (bucket) return &*bucket;
    if (leased) return &*leased;
    return nullptr;
  }
};

/// Everything one run owns: its io_context on virtual time, its random
/// streams, its processes (budgets and gates) and what it measures.
struct world {
  world(const run_config& config, unsigned process_count = 1, fleet_mode fleet = fleet_mode::local)
      : network(config.network, mix(config.seed)), jitter(mix(config.seed ^ 0x6a09e667f3bcc908ULL)) {
    result.clients = config.clients;
    result.attempts.assign(config.clients, 0);
    result.stops.assign(config.clients, coretry::stop_reason::succeeded);
    result.ended.assign(config.clients, duration::zero());
    if (config.gate) result.gate_closed.assign(process_count, std::nullopt);
    for (unsigned p = 0; p < process_count; ++p) {
      auto& s = *processes.emplace_back(std::make_unique<process_state>());
      if (config.budget && fleet == fleet_mode::local)
        s.bucket.emplace(coretry::token_bucket_budget::options{budget_capacity, budget_tokens_per_initial_request});
      if (config.budget && fleet == fleet_mode::shared)
        s.leased.emplace(coretry::leased_budget::options{budget_capacity, budget_tokens_per_initial_request,
                                                         lease_size});
      if (config.gate) {
        s.gate.emplace();
        s.observed.emplace(*s.gate, result.probes, result.gate_closed[p]);
        s.openings = s.gate->openings();
      }
    }
  }

  duration now() const { return runner.elapsed(); }
  /// The process client `i` of `clients` belongs to.
  process_state& process_of(unsigned i) {
    const auto p = static_cast<std::size_t>(std::uint64_t{i} * processes.size() / result.clients);
    return *processes[p];
  }

  /// A call reached the dependency.
  void arrive(unsigned attempt_number) {
    const auto index = static_cast<std::size_t>(now() / bucket_width);
    if (result.arrivals.size() <= index) {
      result.arrivals.resize(index + 1, 0);
      result.retry_arrivals.resize(index + 1, 0);
    }
    ++result.arrivals[index];
    ++result.calls;
    if (attempt_number > 1) {
      ++result.retry_arrivals[index];
      ++result.retries;
    }
  }

  asio::io_context io;
  manual_runner runner{io};
  delay_source network;
  seeded_random jitter;
  std::vector<std::unique_ptr<process_state>> processes;
  unsigned finished = 0; ///< clients whose operation has ended
  /// Shared fleets: the fleet's store, how often each process reconciles
  /// with it and when each first does.
  std::optional<fleet_store> store;
  duration reconcile{};
  std::vector<duration> phases; ///< per process: its first exchange
  run_result result;
  std::exception_ptr failure;
};

/// 200 is success; every failure this dependency gives (409 conflict, 503
/// unavailable or overloaded) is an answered, transient one.
struct herd_classifier {
  coretry::verdict operator()(const boost::system::error_code& ec, int status) const {
    if (ec) return coretry::classify_error(ec);
    if (status == 200) return coretry::verdict::success();
    return coretry::verdict::transient(status == 409 ? "conflict" : "unavailable", coretry::delivery::answered);
  }
};

asio::awaitable<void> wait(manual_timer& timer, duration d) {
  timer.expires_after(d);
  co_await timer.async_wait(asio::use_awaitable);
}

// --- contention: the optimistic-concurrency row ---------------------------

struct occ_row {
  std::uint64_t version = 0;
};

/// One read-then-write attempt, as in the study: the read reaches the row
/// after one delay; its answer comes back and the write goes out (two
/// delays); the write succeeds only if the version is still the one read;
/// its answer takes one more delay.
asio::awaitable<int> occ_attempt(world& w, occ_row& row, unsigned number) {
  manual_timer timer(co_await asio::this_coro::executor);
  co_await wait(timer, w.network.next());
  const std::uint64_t read_version = row.version;
  const duration back_and_forth = w.network.next();
  co_await wait(timer, back_and_forth + w.network.next());
  w.arrive(number);
  const bool written = row.version == read_version;
  if (written) ++row.version;
  co_await wait(timer, w.network.next());
  co_return written ? 200 : 409;
}

// --- outage: a dependency that is down, then has a capacity -----------------

struct outage_dependency {
  duration down_until{};
  unsigned capacity = 0;
  duration service_time{};
  unsigned in_service = 0;
};

asio::awaitable<int> outage_attempt(world& w, outage_dependency& dep, unsigned number) {
  manual_timer timer(co_await asio::this_coro::executor);
  co_await wait(timer, w.network.next());
  w.arrive(number);
  int status = 503;
  if (w.now() < dep.down_until) {
    if (number > 1) ++w.result.failed_retries_in_outage;
  } else if (dep.in_service >= dep.capacity) {
    ++w.result.rejected_after_recovery;
  } else {
    ++dep.in_service;
    struct release {
      unsigned& n;
      ~release() { --n; }
    } serving{dep.in_service};
    co_await wait(timer, dep.service_time);
    status = 200;
  }
  co_await wait(timer, w.network.next());
  co_return status;
}

/// One exchange of process `p` with the fleet's store, as
/// coretry::redis::shared_state makes it, at an instant: deposits and the
/// tokens wanted, the gate's results since the last exchange, "forget" when
/// the gate opened since; then the grant is leased and the gate told the
/// fleet's counts and size.
void exchange(world& w, std::size_t p) {
  process_state& s = *w.processes[p];
  fleet_store::request r;
  r.process = static_cast<unsigned>(p);
  coretry::leased_budget::request lease{};
  if (s.leased) {
    lease = s.leased->begin_exchange();
    r.deposit_units = lease.deposit_units;
    r.want = lease.want;
  }
  if (s.gate) {
    const coretry::gate_model::counts recorded = s.gate->recorded();
    r.requests = recorded.requests - s.published.requests;
    r.accepts = recorded.accepts - s.published.accepts;
    s.published = recorded;
    const std::uint64_t openings = s.gate->openings();
    r.forget = openings != s.openings;
    s.openings = openings;
  }
  const fleet_store::reply answer = w.store->exchange(w.now(), r);
  if (s.leased) s.leased->exchange_succeeded(std::min(answer.granted, lease.want));
  if (s.gate) {
    // The gate's phase is the process's reconciliation phase: the fleet's
    // first probes after closing spread over a slot interval.
    const double phase = static_cast<double>(w.phases[p].count()) / static_cast<double>(w.reconcile.count());
    s.gate->set_fleet({answer.peer_requests, answer.peer_accepts}, std::max(1u, answer.live), w.now(), phase);
    s.observed->note(w.now());
  }
}

/// Process `p`'s reconciler: an exchange at its phase, then one every
/// period, until every client has finished.
asio::awaitable<void> reconciler(world& w, std::size_t p) {
  manual_timer timer(co_await asio::this_coro::executor);
  co_await wait(timer, w.phases[p]);
  while (w.finished < w.result.clients) {
    exchange(w, p);
    co_await wait(timer, w.reconcile);
  }
}

void start_reconcilers(world& w) {
  if (!w.store) return;
  for (std::size_t p = 0; p < w.processes.size(); ++p)
    asio::co_spawn(w.io, reconciler(w, p), [&w](std::exception_ptr error) {
      if (error && !w.failure) w.failure = error;
    });
}

/// Starts every client's retrying operation at time zero (they fail
/// together) and runs virtual time until all have finished.
template <class MakeAttempt>
void run_clients(world& w, const coretry::policy& p, MakeAttempt make_attempt) {
  coretry::retry_options options;
  options.safety = coretry::repeat_safety::idempotent;
  options.random = &w.jitter;
  options.operation = "herd";
  for (unsigned i = 0; i < w.result.clients; ++i) {
    process_state& process = w.process_of(i);
    options.budget = process.budget();
    options.gate = process.observed ? &*process.observed : nullptr;
    coretry::async_retry<manual_timer>(
        w.io.get_executor(), p, options,
        [&make_attempt](coretry::attempt_context<manual_clock> attempt) { return make_attempt(attempt.number); },
        herd_classifier{},
        [&w, i](std::exception_ptr error, coretry::outcome<int> outcome) {
          if (error && !w.failure) w.failure = error;
          w.result.attempts[i] = outcome.attempts;
          w.result.stops[i] = outcome.reason;
          w.result.ended[i] = w.now();
          if (outcome.succeeded()) ++w.result.succeeded;
          if (outcome.reason == coretry::stop_reason::budget_exhausted) ++w.result.budget_stops;
          if (outcome.reason == coretry::stop_reason::dependency_unhealthy) ++w.result.gate_stops;
          ++w.finished;
        });
  }
  start_reconcilers(w);
  w.runner.run();
  if (w.failure) std::rethrow_exception(w.failure);
  w.result.completion = w.result.ended.empty() ? duration::zero()
                                               : *std::max_element(w.result.ended.begin(), w.result.ended.end());
}

void check(const run_config& config) {
  if (config.clients == 0) throw std::invalid_argument("clients must be at least 1");
  if (config.base < duration::zero() || config.cap < duration::zero())
    throw std::invalid_argument("backoff base and cap must not be negative");
  if (config.cap < config.base) throw std::invalid_argument("backoff cap is smaller than its base");
  if (config.network.mean < duration::zero() || config.network.sd < duration::zero())
    throw std::invalid_argument("network delay mean and deviation must not be negative");
}

} // namespace

std::string_view to_string(strategy s) noexcept {
  switch (s) {
  case strategy::no_backoff: return "no-backoff";
  case strategy::exponential: return "exponential";
  case strategy::full: return "full";
  case strategy::equal: return "equal";
  case strategy::decorrelated: return "decorrelated";
  }
  return "invalid";
}

std::string_view to_string(fleet_mode f) noexcept {
  switch (f) {
  case fleet_mode::local: return "local";
  case fleet_mode::shared: return "shared";
  }
  return "invalid";
}

std::optional<strategy> parse_strategy(std::string_view name) noexcept {
  for (strategy s : all_strategies)
    if (name == to_string(s)) return s;
  return std::nullopt;
}

coretry::backoff_policy backoff_for(strategy s, duration base, duration cap) {
  coretry::backoff_policy b;
  b.initial_window = base;
  b.multiplier = 2.0;
  b.max_window = cap;
  b.floor = duration::zero();
  switch (s) {
  case strategy::no_backoff:
    b.initial_window = b.max_window = duration::zero();
    b.multiplier = 1.0;
    b.jitter = coretry::jitter_kind::none;
    break;
  case strategy::exponential: b.jitter = coretry::jitter_kind::none; break;
  case strategy::full: b.jitter = coretry::jitter_kind::full; break;
  case strategy::equal: b.jitter = coretry::jitter_kind::equal; break;
  case strategy::decorrelated: b.jitter = coretry::jitter_kind::decorrelated; break;
  }
  return b;
}

run_result run_contention(const contention_config& config) {
  check(config);
  coretry::policy p;
  p.max_attempts = std::numeric_limits<unsigned>::max(); // unlimited, as in the study
  p.overall_deadline = duration::max();
  p.attempt_limit = std::chrono::hours(1); // the row never makes an attempt wait
  p.min_attempt_allowance = duration::zero();
  p.completion_reserve = duration::zero();
  p.backoff = backoff_for(config.retry, config.base, config.cap);

  world w(config);
  occ_row row;
  run_clients(w, p, [&](unsigned number) { return occ_attempt(w, row, number); });
  return std::move(w.result);
}

run_result run_outage(const outage_config& config) {
  check(config);
  if (config.outage < duration::zero()) throw std::invalid_argument("outage must not be negative");
  if (config.capacity == 0) throw std::invalid_argument("capacity must be at least 1");
  if (config.service_time < duration::zero()) throw std::invalid_argument("service time must not be negative");
  if (config.max_attempts == 0) throw std::invalid_argument("max attempts must be at least 1");
  if (config.deadline <= duration::zero()) throw std::invalid_argument("deadline must be positive");
  if (config.processes == 0 || config.processes > config.clients)
    throw std::invalid_argument("processes must be between 1 and the number of clients");
  if (config.fleet == fleet_mode::shared && config.reconcile <= duration::zero())
    throw std::invalid_argument("the reconciliation period must be positive");
  coretry::policy p;
  p.max_attempts = config.max_attempts;
  p.overall_deadline = config.deadline;
  p.attempt_limit = config.attempt_limit;
  p.min_attempt_allowance = duration::zero();
  p.completion_reserve = duration::zero();
  p.backoff = backoff_for(config.retry, config.base, config.cap);

  world w(config, config.processes, config.fleet);
  if (config.fleet == fleet_mode::shared && (config.budget || config.gate)) {
    fleet_store::options store;
    store.capacity_units = std::llround(budget_capacity * static_cast<double>(coretry::leased_budget::units_per_token));
    store.budget = config.budget;
    constexpr auto buckets = static_cast<std::int64_t>(coretry::gate_model::buckets);
    store.gate_width = config.gate ? w.processes.front()->gate->settings().window / buckets : duration::zero();
    store.stale = std::max<duration>(500ms, 4 * config.reconcile); // as shared_state does
    w.store.emplace(store);
    w.reconcile = config.reconcile;
    for (unsigned p = 0; p < config.processes; ++p) w.phases.push_back(reconcile_phase(config, p));
  }
  outage_dependency dep{config.outage, config.capacity, config.service_time};
  run_clients(w, p, [&](unsigned number) { return outage_attempt(w, dep, number); });
  return std::move(w.result);
}

std::uint32_t peak(const std::vector<std::uint32_t>& buckets, std::size_t from) noexcept {
  if (from >= buckets.size()) return 0;
  return *std::max_element(buckets.begin() + static_cast<std::ptrdiff_t>(from), buckets.end());
}

duration percentile(std::vector<duration> values, double q) {
  if (values.empty()) return duration::zero();
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size()));
  const std::size_t index = rank < 1.0 ? 0 : static_cast<std::size_t>(rank) - 1;
  return values[std::min(index, values.size() - 1)];
}

std::uint64_t run_seed(std::uint64_t study_seed, std::string_view scenario, unsigned clients, unsigned run) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL; // FNV-1a over the scenario's name
  for (unsigned char c : scenario) h = (h ^ c) * 0x100000001b3ULL;
  return mix(mix(mix(study_seed ^ h) ^ clients) ^ (std::uint64_t{run} << 32));
}

std::vector<contention_row> run_contention_study(const contention_study& study, const progress_fn& progress) {
  std::vector<contention_row> rows;
  const std::size_t total = study.client_counts.size() * study.strategies.size() * study.budgets.size() * study.runs;
  std::size_t done = 0;
  for (unsigned clients : study.client_counts)
    for (bool budget : study.budgets)
      for (strategy s : study.strategies) {
        contention_row row{clients, s, budget, study.runs};
        std::uint64_t succeeded = 0;
        for (unsigned run = 0; run < study.runs; ++run) {
          contention_config c;
          c.clients = clients;
          c.retry = s;
          c.budget = budget;
          c.base = study.base;
          c.cap = study.cap;
          c.network = study.network;
          // The same seed for every strategy: each sees the same network.
          c.seed = run_seed(study.seed, "contention", clients, run);
          const run_result r = run_contention(c);
          row.mean_calls += static_cast<double>(r.calls);
          row.mean_completion_ms += std::chrono::duration<double, std::milli>(r.completion).count();
          succeeded += r.succeeded;
          if (progress)
            progress(++done, total,
                     "contention " + std::to_string(clients) + " clients " + std::string(to_string(s)) +
                         (budget ? " budget" : ""));
        }
        if (study.runs > 0) {
          row.mean_calls /= study.runs;
          row.mean_completion_ms /= study.runs;
          row.success_rate = static_cast<double>(succeeded) / (static_cast<double>(clients) * study.runs);
        }
        rows.push_back(row);
      }
  return rows;
}

outage_row summarize_outage(const outage_config& config, const run_result& r) {
  outage_row row;
  row.retry = config.retry;
  row.budget = config.budget;
  row.clients = r.clients;
  row.calls = r.calls;
  row.retries = r.retries;
  std::uint64_t attempts = 0;
  for (unsigned a : r.attempts) {
    attempts += a;
    row.max_attempts_per_client = std::max(row.max_attempts_per_client, a);
  }
  row.attempts_per_client = r.clients ? static_cast<double>(attempts) / r.clients : 0.0;
  row.success_rate = r.clients ? static_cast<double>(r.succeeded) / r.clients : 0.0;
  row.budget_stops = r.budget_stops;
  row.gate = config.gate;
  row.gate_stops = r.gate_stops;
  row.failed_retries_in_outage = r.failed_retries_in_outage;
  row.rejected_after_recovery = r.rejected_after_recovery;
  row.peak_arrivals = peak(r.arrivals);
  row.peak_retry_arrivals = peak(r.retry_arrivals);
  // The first bucket that lies wholly after the outage.
  const auto recovered = static_cast<std::size_t>((config.outage + bucket_width - duration(1)) / bucket_width);
  row.peak_after_recovery = peak(r.arrivals, recovered);
  std::vector<duration> successes;
  for (std::size_t i = 0; i < r.ended.size(); ++i)
    if (r.stops[i] == coretry::stop_reason::succeeded) successes.push_back(r.ended[i]);
  row.p50 = percentile(successes, 0.50);
  row.p90 = percentile(successes, 0.90);
  row.p99 = percentile(successes, 0.99);
  row.max = percentile(successes, 1.0);
  row.completion = r.completion;
  row.arrivals = r.arrivals;
  row.processes = config.processes;
  row.fleet = config.fleet;
  row.reconcile = config.reconcile;
  row.amplification = r.clients ? static_cast<double>(r.calls) / r.clients : 0.0;
  row.fleet_probes_per_s = fleet_probe_rate(config, r);
  return row;
}

duration reconcile_phase(const outage_config& config, unsigned process) noexcept {
  const std::int64_t k = std::max(1u, config.processes);
  const auto spacing = static_cast<std::uint64_t>(std::max<duration::rep>(1, (config.reconcile / k).count()));
  const duration offset(static_cast<duration::rep>(mix(config.seed ^ 0xbb67ae8584caa73bULL) % spacing));
  return offset + config.reconcile * static_cast<std::int64_t>(process) / k;
}

std::optional<double> fleet_probe_rate(const outage_config& config, const run_result& r) {
  if (r.gate_closed.empty()) return std::nullopt;
  duration from{};
  for (const auto& closed : r.gate_closed) {
    if (!closed || *closed >= config.outage) return std::nullopt;
    from = std::max(from, *closed);
  }
  const auto probes = std::count_if(r.probes.begin(), r.probes.end(),
                                    [&](duration t) { return t >= from && t < config.outage; });
  return static_cast<double>(probes) / std::chrono::duration<double>(config.outage - from).count();
}

bool is_fleet_study(const outage_study& study) noexcept {
  return study.config.processes > 1 ||
         std::any_of(study.fleets.begin(), study.fleets.end(), [](fleet_mode f) { return f != fleet_mode::local; });
}

std::vector<outage_row> run_outage_study(const outage_study& study, const progress_fn& progress) {
  std::vector<outage_row> rows;
  const std::size_t total =
      study.fleets.size() * study.strategies.size() * study.budgets.size() * study.gates.size();
  std::size_t done = 0;
  for (fleet_mode fleet : study.fleets)
    for (bool gate : study.gates)
      for (bool budget : study.budgets)
        for (strategy s : study.strategies) {
          outage_config c = study.config;
          c.retry = s;
          c.budget = budget;
          c.gate = gate;
          c.fleet = fleet;
          // The same seed for every fleet mode and process count: each sees the same network.
          c.seed = run_seed(study.seed, "outage", c.clients, 0);
          rows.push_back(summarize_outage(c, run_outage(c)));
          if (progress)
            progress(++done, total,
                     "outage " + std::to_string(c.clients) + " clients " + std::string(to_string(s)) +
                         (budget ? " budget" : "") + (gate ? " gate" : "") +
                         (is_fleet_study(study) ? " " + std::to_string(c.processes) + " processes " +
                                                      std::string(to_string(fleet))
                                                : ""));
        }
  return rows;
}

} // namespace herd
