#ifndef CORETRY_TESTS_LIMIT_SIMULATION_HPP
#define CORETRY_TESTS_LIMIT_SIMULATION_HPP

// A deterministic simulation of concurrency limits in front of one
// dependency, on virtual time (every instant a time since the manual
// clock's epoch, passed to the limits; nothing reads a clock).
//
// The dependency has `workers` workers and a FIFO queue without bound; a
// request takes `service` x a uniform draw in [1 - spread, 1 + spread]. It
// never notices that a caller gave up: a request whose attempt timed out is
// still served when its turn comes (wasted work). Each client has its own
// concurrency_limit and Poisson arrivals from a seeded source; an arrival
// takes a permit, or waits for one (at most max_wait, then it is refused),
// or is refused. A permit is given back when the answer comes (a latency
// sample) or when the attempt's timeout fires first (a drop).

#include <coretry/concurrency_limit.hpp>
#include <coretry/testing/random.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <queue>
#include <vector>

namespace coretry_limit_sim {

using coretry::concurrency_limit;
using coretry::duration;
using namespace std::chrono_literals;

struct client_config {
  concurrency_limit::options limit;
  /// Offered load, as a multiple of the dependency's capacity, at an instant.
  std::function<double(duration)> load;
};

struct config {
  std::function<unsigned(duration)> workers = [](duration) { return 8u; };
  duration service = 25ms;
  double spread = 0.2;
  duration attempt_timeout = 250ms;
  /// Capacity the load is a multiple of (requests a second): workers at the start / service.
  double capacity() const { return workers(duration::zero()) / std::chrono::duration<double>(service).count(); }
  std::vector<client_config> clients;
  duration run = 20s;
  std::uint64_t seed = 1;
};

/// What one client saw between two instants.
struct client_figures {
  std::uint64_t arrivals = 0;
  std::uint64_t admitted = 0;  ///< got a permit (at once or after a wait)
  std::uint64_t refused = 0;
  std::uint64_t succeeded = 0; ///< answered before the attempt's timeout
  std::uint64_t timed_out = 0;
  double limit_sum = 0, held_sum = 0; ///< sums over 1 ms ticks
  std::uint64_t ticks = 0;
  unsigned held_max = 0;
  double admitted_share() const { return arrivals ? double(admitted) / double(arrivals) : 1.0; }
  double mean_limit() const { return ticks ? limit_sum / double(ticks) : 0.0; }
  double mean_held() const { return ticks ? held_sum / double(ticks) : 0.0; }
};

class simulation {
public:
  explicit simulation(config c) : config_(std::move(c)), random_(config_.seed) {
    for (auto& cc : config_.clients) clients_.push_back(std::make_unique<client>(cc.limit));
    for (std::size_t i = 0; i < clients_.size(); ++i) schedule(next_arrival(i, duration::zero()), kind::arrival, i);
    schedule(1ms, kind::tick, 0);
  }

  /// Runs until `until`; figures count from `from` (earlier events are run, not counted).
  void run_until(duration until) {
    while (!events_.empty() && events_.top().at < until) {
      const event e = events_.top();
      events_.pop();
      now_ = e.at;
      handle(e);
    }
    now_ = until;
  }
  /// Starts counting afresh (figures and the dependency's work).
  void reset_figures() {
    for (auto& c : clients_) c->figures = {};
    useful_ = wasted_ = duration::zero();
  }

  const client_figures& figures(std::size_t i) const { return clients_[i]->figures; }
  concurrency_limit& limit(std::size_t i) { return clients_[i]->limit; }
  duration now() const { return now_; }
  /// Successes a second over `span`, as a share of the capacity (workers at `now` / service).
  double goodput(duration span, std::size_t i) const {
    return double(clients_[i]->figures.succeeded) / std::chrono::duration<double>(span).count() /
           (config_.workers(now_) / std::chrono::duration<double>(config_.service).count());
  }
  double total_goodput(duration span) const {
    double g = 0;
    for (std::size_t i = 0; i < clients_.size(); ++i) g += goodput(span, i);
    return g;
  }
  /// The share of the dependency's work spent on abandoned requests.
  double wasted_share() const {
    const auto all = (useful_ + wasted_).count();
    return all ? double(wasted_.count()) / double(all) : 0.0;
  }

private:
  enum class kind { arrival, wait_over, attempt_over, served, tick };
  struct event {
    duration at;
    std::uint64_t seq;
    kind what;
    std::size_t id;
    bool operator>(const event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  struct request;
  struct waiter final : coretry::permit_waiter {
    simulation* sim = nullptr;
    std::size_t id = 0;
    bool accept_permit() noexcept override { return true; }
    void permit_granted() noexcept override { sim->granted_.push_back(id); }
  };
  struct request {
    std::size_t client = 0;
    duration started{};
    duration service{};
    bool waiting = false, in_attempt = false, done = false, abandoned = false;
    waiter w;
  };
  struct client {
    explicit client(const concurrency_limit::options& o) : limit(o) {}
    concurrency_limit limit;
    client_figures figures;
  };

  void schedule(duration at, kind what, std::size_t id) { events_.push({at, seq_++, what, id}); }

  double uniform01() { return double(random_.uniform((std::uint64_t{1} << 53) - 1)) / double(std::uint64_t{1} << 53); }

  duration next_arrival(std::size_t i, duration from) {
    const double rate = config_.clients[i].load(from) * config_.capacity();
    if (rate <= 0) return from + 10ms; // idle: look again later
    const double gap = -std::log(1.0 - uniform01()) / rate;
    return from + std::chrono::duration_cast<duration>(std::chrono::duration<double>(gap));
  }

  void handle(const event& e) {
    switch (e.what) {
    case kind::arrival: arrive(e.id); break;
    case kind::wait_over: wait_over(e.id); break;
    case kind::attempt_over: attempt_over(e.id); break;
    case kind::served: served(e.id); break;
    case kind::tick: tick(); break;
    }
    start_granted();
  }

  void arrive(std::size_t c) {
    schedule(next_arrival(c, now_), kind::arrival, c);
    if (config_.clients[c].load(now_) <= 0) return;
    auto& f = clients_[c]->figures;
    ++f.arrivals;
    const std::size_t id = requests_.size();
    requests_.push_back(std::make_unique<request>());
    request& r = *requests_[id];
    r.client = c;
    r.w.sim = this;
    r.w.id = id;
    switch (clients_[c]->limit.wait(r.w)) {
    case concurrency_limit::wait_result::acquired: start_attempt(id); break;
    case concurrency_limit::wait_result::queued:
      r.waiting = true;
      schedule(now_ + clients_[c]->limit.settings().max_wait, kind::wait_over, id);
      break;
    case concurrency_limit::wait_result::refused: ++f.refused; break;
    }
  }

  void wait_over(std::size_t id) {
    request& r = *requests_[id];
    if (!r.waiting) return;
    r.waiting = false;
    if (clients_[r.client]->limit.cancel_wait(r.w) == concurrency_limit::cancel_result::removed)
      ++clients_[r.client]->figures.refused;
    // granted: permit_granted queued it in granted_, started after this event
  }

  void start_granted() {
    while (!granted_.empty()) {
      const std::size_t id = granted_.front();
      granted_.pop_front();
      requests_[id]->waiting = false;
      start_attempt(id);
    }
  }

  void start_attempt(std::size_t id) {
    request& r = *requests_[id];
    ++clients_[r.client]->figures.admitted;
    r.in_attempt = true;
    r.started = now_;
    const double factor = 1.0 + config_.spread * (2.0 * uniform01() - 1.0);
    r.service = std::chrono::duration_cast<duration>(config_.service * factor);
    schedule(now_ + config_.attempt_timeout, kind::attempt_over, id);
    queue_.push_back(id);
    dispatch();
  }

  void dispatch() {
    while (busy_ < config_.workers(now_) && !queue_.empty()) {
      const std::size_t id = queue_.front();
      queue_.pop_front();
      ++busy_;
      schedule(now_ + requests_[id]->service, kind::served, id);
    }
  }

  void served(std::size_t id) {
    request& r = *requests_[id];
    --busy_;
    r.done = true;
    if (r.abandoned) {
      wasted_ += r.service;
    } else {
      useful_ += r.service;
      r.in_attempt = false;
      ++clients_[r.client]->figures.succeeded;
      clients_[r.client]->limit.release(now_, now_ - r.started, coretry::limit_signal::sample);
    }
    dispatch();
  }

  void attempt_over(std::size_t id) {
    request& r = *requests_[id];
    if (!r.in_attempt) return;
    r.in_attempt = false;
    r.abandoned = true;
    ++clients_[r.client]->figures.timed_out;
    clients_[r.client]->limit.release(now_, now_ - r.started, coretry::limit_signal::drop);
  }

  void tick() {
    for (auto& c : clients_) {
      auto& f = c->figures;
      ++f.ticks;
      f.limit_sum += c->limit.limit();
      f.held_sum += c->limit.in_flight();
      f.held_max = std::max(f.held_max, c->limit.in_flight());
    }
    schedule(now_ + 1ms, kind::tick, 0);
  }

  config config_;
  coretry::testing::seeded_random random_;
  std::vector<std::unique_ptr<client>> clients_;
  std::vector<std::unique_ptr<request>> requests_;
  std::deque<std::size_t> queue_;
  std::deque<std::size_t> granted_;
  std::priority_queue<event, std::vector<event>, std::greater<>> events_;
  std::uint64_t seq_ = 0;
  unsigned busy_ = 0;
  duration now_{};
  duration useful_{}, wasted_{};
};

} // namespace coretry_limit_sim

#endif
