// The engine on a multi-threaded io_context: thousands of async_with_deadline
// and async_retry operations on four threads, with plain callbacks on the
// bare io_context executor, callbacks bound to strands and coroutines;
// deadlines that race the operation's completion within microseconds; the
// caller's cancellation sent from other threads (through the handler's
// strand, as Asio requires); hedged operations sharing one gate, budget and
// latency tracker, every retry and hedge a probe the gate must hear the end
// of exactly once; every retrying operation sharing one small adaptive
// concurrency limit, every permit given back and no waiter left; handlers on a strand of a second io_context, cancelled
// from there; and, in some rounds, the I/O context stopped and destroyed
// mid-flight. Every handler must run exactly once, on its executor, and
// nothing may outlive its context; the handler of a retrying operation bound
// to a strand (hedged or not) runs only once none of its attempts'
// operations is still running. Run it under tsan and asan: a data race
// or a use after free there is a failure too.
//
// Seeded: CORETRY_STRESS_SEED replays a run (the seed is printed on
// failure), CORETRY_STRESS_ROUNDS and CORETRY_STRESS_OPERATIONS size it.

#include "test_support.hpp"

#include <coretry/with_deadline.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

using namespace coretry_tests;
using std::chrono::microseconds;

namespace {

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  return std::strtoull(text, nullptr, 10);
}

/// What became of each operation's handler.
struct ledger {
  explicit ledger(std::size_t n) : ran(n), unrun(n) {}
  std::vector<std::atomic<int>> ran;   ///< times the handler ran
  std::vector<std::atomic<int>> unrun; ///< times it was destroyed without running
  std::atomic<int> wrong_executor{0};
  std::atomic<int> attempts_running{0}; ///< handlers that ran while an attempt's operation of theirs still ran
  std::atomic<int> live{0}; ///< handlers (or coroutine frames) not yet run nor destroyed
};

/// Carried by a handler: counts the handler's one run, or its destruction
/// unrun. Move-only; only the last owner counts.
class probe {
public:
  probe(ledger& l, std::size_t index) : ledger_(&l), index_(index) { ++l.live; }
  probe(probe&& other) noexcept
      : ledger_(other.ledger_), index_(other.index_), armed_(std::exchange(other.armed_, false)) {}
  probe& operator=(probe&&) = delete;
  ~probe() {
    if (!armed_) return;
    ++ledger_->unrun[index_];
    --ledger_->live;
  }
  void ran(bool on_its_executor) {
    REQUIRE(armed_);
    armed_ = false;
    ++ledger_->ran[index_];
    if (!on_its_executor) ++ledger_->wrong_executor;
    --ledger_->live;
  }

private:
  ledger* ledger_;
  std::size_t index_;
  bool armed_ = true;
};

/// A real Asio operation: a timer that completes with (no error, 200) after
/// `after`, or with operation_aborted when cancelled through the handler's
/// slot; completion through the handler's executor. With `after` zero it
/// completes at once, posted to that executor: on another thread, while
/// the call that started it may still be running. `running` (if given)
/// counts it from its start until it calls its handler.
auto timed_operation(asio::io_context& io, microseconds after, std::atomic<int>* running = nullptr) {
  return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code, int)>(
      [&io, after, running](auto handler) {
        if (running) ++*running;
        auto ex = asio::get_associated_executor(handler);
        if (after == microseconds::zero()) {
          return asio::post(ex, [running, h = std::move(handler)]() mutable {
            if (running) --*running;
            std::move(h)(boost::system::error_code(), 200);
          });
        }
        auto timer = std::make_shared<asio::steady_timer>(io, after);
        auto slot = asio::get_associated_cancellation_slot(handler);
        timer->async_wait(asio::bind_cancellation_slot(
            slot, asio::bind_executor(ex, [timer, running, h = std::move(handler)](boost::system::error_code ec) mutable {
              if (running) --*running;
              std::move(h)(ec, ec ? 0 : 200);
            })));
      },
      asio::deferred);
}

/// A gate shared by every operation of a round, on every thread: it admits
/// every retry and hedge as a probe, and checks that each probe it admitted
/// is said to be over exactly once.
class probe_ledger_gate final : public coretry::retry_gate {
public:
  void record(coretry::attempt_status, coretry::duration) noexcept override {}
  coretry::gate_decision ask(coretry::duration, coretry::duration, const coretry::gate_decision*) noexcept override {
    std::lock_guard lock(mutex_);
    const std::uint64_t ticket = next_++;
    open_.insert(ticket);
    return coretry::gate_decision::admit_probe(ticket);
  }
  void probe_ended(std::uint64_t ticket) noexcept override {
    std::lock_guard lock(mutex_);
    if (open_.erase(ticket) == 0) ++unknown_;
  }
  /// "" when every admitted probe ended once, else what went wrong.
  std::string broken() const {
    std::lock_guard lock(mutex_);
    if (!open_.empty()) return std::to_string(open_.size()) + " of " + std::to_string(next_ - 1) + " probes never ended";
    if (unknown_ != 0) return std::to_string(unknown_) + " probes ended twice or were never admitted";
    return "";
  }

private:
  mutable std::mutex mutex_;
  std::uint64_t next_ = 1;
  std::set<std::uint64_t> open_;
  std::uint64_t unknown_ = 0;
};

coretry::policy tiny_policy() {
  coretry::policy p;
  p.max_attempts = 3;
  p.overall_deadline = microseconds(6000);
  p.attempt_limit = microseconds(1500);
  p.min_attempt_allowance = microseconds(100);
  p.completion_reserve = microseconds(0);
  p.backoff.initial_window = microseconds(300);
  p.backoff.max_window = microseconds(600);
  p.server_delay_spread = microseconds(0);
  p.timer_slack = microseconds(0);
  return p;
}

coretry::policy hedged_policy() {
  coretry::policy p = tiny_policy();
  p.max_attempts = 4;
  p.hedging.max_hedges = 2;
  p.hedging.delay = microseconds(300);
  return p;
}

enum class kind {
  deadline_bare,
  deadline_strand,
  deadline_coroutine,
  retry_bare,
  retry_strand,
  retry_coroutine,
  retry_hedged,
  deadline_other_context,
  retry_other_context,
};
constexpr int kinds = 9;

const char* name(kind k) {
  switch (k) {
  case kind::deadline_bare: return "async_with_deadline, callback on the bare executor";
  case kind::deadline_strand: return "async_with_deadline, callback on a strand";
  case kind::deadline_coroutine: return "async_with_deadline, use_awaitable";
  case kind::retry_bare: return "async_retry, callback on the bare executor";
  case kind::retry_strand: return "async_retry, callback on a strand";
  case kind::retry_coroutine: return "async_retry, use_awaitable";
  case kind::retry_hedged: return "async_retry with hedges, a shared gate, budget and tracker, callback on a strand";
  case kind::deadline_other_context: return "async_with_deadline, callback on a strand of a second io_context";
  case kind::retry_other_context: return "async_retry, callback on a strand of a second io_context";
  }
  return "?";
}

/// One round: `n` operations on a 4-thread io_context; `teardown` stops and
/// destroys it after `teardown_after` instead of letting it run dry.
/// Returns a description of the first broken promise, or "".
std::string round(std::uint64_t seed, std::size_t n, bool teardown) {
  std::mt19937_64 random(seed);
  auto draw = [&](std::uint64_t below) { return std::uniform_int_distribution<std::uint64_t>(0, below - 1)(random); };
  ledger book(n);
  std::vector<kind> kinds_of(n);
  const coretry::policy policy = tiny_policy();
  // One concurrency limit shared by every retrying operation of the round,
  // small enough that attempts wait for permits and are refused, on every
  // thread; adaptive, so that it moves while they do. Every permit must be
  // back, and no waiter left, when the round ends, torn down or not.
  coretry::concurrency_limit::options limit_options;
  limit_options.initial_limit = 6;
  limit_options.min_limit = 2;
  limit_options.max_limit = 32;
  limit_options.window = microseconds(500);
  limit_options.max_wait = microseconds(300);
  limit_options.max_waiters = 8;
  coretry::concurrency_limit limit(limit_options);
  coretry::retry_options options;
  options.safety = coretry::repeat_safety::idempotent;
  options.cancellation_repeat = microseconds(200);
  options.limit = &limit;
  // Shared by the hedged operations; they outlive both contexts.
  const coretry::policy hedged = hedged_policy();
  probe_ledger_gate gate;
  // Room for most retries and hedges, so that many probes are admitted.
  coretry::token_bucket_budget budget({/*capacity=*/100.0, /*tokens_per_initial_request=*/0.5});
  coretry::latency_tracker tracker;
  coretry::retry_options hedged_options = options;
  hedged_options.gate = &gate;
  hedged_options.budget = &budget;
  hedged_options.tracker = &tracker;
  // The handlers' context: two threads of its own, outliving the I/O context.
  asio::io_context other(2);
  auto other_work = asio::make_work_guard(other);
  std::vector<std::thread> other_threads;
  for (int t = 0; t < 2; ++t) other_threads.emplace_back([&other] { other.run(); });
  std::vector<asio::strand<asio::io_context::executor_type>> other_strands;
  for (int i = 0; i < 4; ++i) other_strands.push_back(asio::make_strand(other));
  {
    asio::io_context io(4);
    auto bare = io.get_executor();
    std::vector<asio::strand<asio::io_context::executor_type>> strands;
    for (int i = 0; i < 8; ++i) strands.push_back(asio::make_strand(io));
    auto work = asio::make_work_guard(io);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) threads.emplace_back([&io] { io.run(); });

    for (std::size_t i = 0; i < n; ++i) {
      const auto k = static_cast<kind>(draw(kinds));
      kinds_of[i] = k;
      // Deadline and operation drawn from the same range: they race.
      const microseconds takes(draw(4) == 0 ? 0 : draw(2000));
      const auto deadline = std::chrono::steady_clock::now() + microseconds(draw(2000));
      auto strand = strands[draw(strands.size())];
      auto other_strand = other_strands[draw(other_strands.size())];
      // The caller's cancellation, from the handler's strand (other
      // threads than the one that started the operation), in half of the
      // strand-bound operations: a strand of the I/O context, or one of the
      // second context for a handler bound there.
      const bool cancel = draw(2) == 0;
      const microseconds cancel_after(draw(2000));
      auto signal = std::make_shared<asio::cancellation_signal>();
      auto done = std::make_shared<bool>(false); // touched on the strand only
      auto arm_cancel_on = [&, signal, done, cancel_after](auto on, asio::io_context& timers) {
        auto timer = std::make_shared<asio::steady_timer>(timers, cancel_after);
        timer->async_wait(asio::bind_executor(on, [timer, signal, done](boost::system::error_code) {
          if (!*done) signal->emit(asio::cancellation_type::terminal);
        }));
      };
      auto arm_cancel = [&, strand] { arm_cancel_on(strand, io); };
      switch (k) {
      case kind::deadline_bare:
        coretry::async_with_deadline<int>(bare, deadline, timed_operation(io, takes),
                                          [p = probe(book, i)](coretry::deadline_outcome<int>) mutable {
                                            // Any thread that runs the io_context is its executor.
                                            p.ran(true);
                                          });
        break;
      case kind::deadline_strand:
        coretry::async_with_deadline<int>(
            bare, deadline, timed_operation(io, takes),
            asio::bind_cancellation_slot(
                signal->slot(), asio::bind_executor(strand, [p = probe(book, i), strand, signal,
                                                             done](coretry::deadline_outcome<int>) mutable {
                  *done = true;
                  p.ran(strand.running_in_this_thread());
                })));
        if (cancel) arm_cancel();
        break;
      case kind::deadline_coroutine:
        asio::co_spawn(
            bare,
            [&io, takes, deadline, p = probe(book, i)]() mutable -> asio::awaitable<void> {
              auto ex = co_await asio::this_coro::executor;
              co_await coretry::async_with_deadline<int>(ex, deadline, timed_operation(io, takes), asio::use_awaitable);
              p.ran(io.get_executor().running_in_this_thread());
            },
            asio::detached);
        break;
      case kind::retry_bare:
        coretry::async_retry(bare, policy, options,
                             [&io, takes](const auto&) { return timed_operation(io, takes); },
                             [p = probe(book, i), &io](std::exception_ptr, coretry::outcome<int>) mutable {
                               p.ran(io.get_executor().running_in_this_thread());
                             });
        break;
      case kind::retry_strand:
      case kind::retry_hedged: {
        // Its attempts' operations still running (hedges run side by side).
        auto running = std::make_shared<std::atomic<int>>(0);
        coretry::async_retry(
            bare, k == kind::retry_hedged ? hedged : policy, k == kind::retry_hedged ? hedged_options : options,
            [&io, takes, running](const auto&) { return timed_operation(io, takes, running.get()); },
            asio::bind_cancellation_slot(
                signal->slot(),
                asio::bind_executor(strand, [p = probe(book, i), strand, signal, done, running,
                                             &book](std::exception_ptr, coretry::outcome<int>) mutable {
                  *done = true;
                  if (running->load() != 0) ++book.attempts_running;
                  p.ran(strand.running_in_this_thread());
                })));
        if (cancel) arm_cancel();
        break;
      }
      case kind::deadline_other_context:
        coretry::async_with_deadline<int>(
            bare, deadline, timed_operation(io, takes),
            asio::bind_cancellation_slot(
                signal->slot(),
                asio::bind_executor(other_strand, [p = probe(book, i), other_strand, signal,
                                                   done](coretry::deadline_outcome<int>) mutable {
                  *done = true;
                  p.ran(other_strand.running_in_this_thread());
                })));
        if (cancel) arm_cancel_on(other_strand, other);
        break;
      case kind::retry_other_context:
        coretry::async_retry(
            bare, policy, options, [&io, takes](const auto&) { return timed_operation(io, takes); },
            asio::bind_cancellation_slot(
                signal->slot(),
                asio::bind_executor(other_strand, [p = probe(book, i), other_strand, signal,
                                                   done](std::exception_ptr, coretry::outcome<int>) mutable {
                  *done = true;
                  p.ran(other_strand.running_in_this_thread());
                })));
        if (cancel) arm_cancel_on(other_strand, other);
        break;
      case kind::retry_coroutine:
        asio::co_spawn(
            strand,
            [&io, takes, policy, options, strand, p = probe(book, i)]() mutable -> asio::awaitable<void> {
              auto ex = co_await asio::this_coro::executor;
              co_await coretry::async_retry(
                  ex, policy, options, [&io, takes](const auto&) { return timed_operation(io, takes); },
                  asio::use_awaitable);
              p.ran(strand.running_in_this_thread());
            },
            asio::detached);
        break;
      }
      if (draw(64) == 0) std::this_thread::sleep_for(microseconds(draw(500)));
    }
    if (teardown) {
      std::this_thread::sleep_for(microseconds(draw(3000)));
      io.stop();
    }
    work.reset();
    for (auto& t : threads) t.join();
    if (!teardown) {
      // Ran dry: every handler has run (those of the second context once
      // it has run what was posted there), none was dropped.
      other_work.reset();
      for (auto& t : other_threads) t.join();
      for (std::size_t i = 0; i < n; ++i)
        if (book.ran[i] != 1 || book.unrun[i] != 0) {
          std::ostringstream out;
          out << "operation " << i << " (" << name(kinds_of[i]) << "): ran " << book.ran[i] << " times, destroyed unrun "
              << book.unrun[i] << " times, though the io_context ran dry";
          return out.str();
        }
    }
  } // the io_context is destroyed here, with whatever is still pending
  // The second context runs what was posted to it, then is destroyed.
  other_work.reset();
  for (auto& t : other_threads)
    if (t.joinable()) t.join();
  other.restart();
  other.run();
  if (std::string broken = gate.broken(); !broken.empty()) return "the shared gate: " + broken;
  if (limit.in_flight() != 0 || limit.waiting() != 0)
    return "the shared concurrency limit: " + std::to_string(limit.in_flight()) + " permits never given back, " +
           std::to_string(limit.waiting()) + " waiters left in its queue";
  for (std::size_t i = 0; i < n; ++i)
    if (book.ran[i] + book.unrun[i] != 1 || book.ran[i] > 1) {
      std::ostringstream out;
      out << "operation " << i << " (" << name(kinds_of[i]) << "): ran " << book.ran[i] << " times, destroyed unrun "
          << book.unrun[i] << " times";
      return out.str();
    }
  if (book.live != 0) return std::to_string(book.live.load()) + " handlers outlived their io_context";
  if (book.wrong_executor != 0) return std::to_string(book.wrong_executor.load()) + " handlers ran off their executor";
  if (book.attempts_running != 0)
    return std::to_string(book.attempts_running.load()) + " handlers ran while an attempt's operation still ran";
  return "";
}

} // namespace

TEST_CASE("thread stress: every handler runs exactly once, on its executor, on a 4-thread io_context") {
  const std::uint64_t seed = env_number("CORETRY_STRESS_SEED", std::random_device{}());
  const std::uint64_t rounds = env_number("CORETRY_STRESS_ROUNDS", 48);
  const std::size_t operations = env_number("CORETRY_STRESS_OPERATIONS", 500);
  for (std::uint64_t r = 0; r < rounds; ++r) {
    const std::uint64_t round_seed = seed + r;
    const bool teardown = r % 4 == 3;
    const std::string broken = round(round_seed, operations, teardown);
    if (!broken.empty()) {
      FAIL_CHECK("round " << r << std::string(teardown ? " (torn down mid-flight)" : "") << ": " << broken
                          << "; replay with CORETRY_STRESS_SEED=" << round_seed << " CORETRY_STRESS_ROUNDS=1"
                          << (teardown ? " (round 3 of 4 tears down: use CORETRY_STRESS_SEED=" +
                                             std::to_string(round_seed - 3) + " CORETRY_STRESS_ROUNDS=4)"
                                       : std::string()));
      return;
    }
  }
  MESSAGE("seed " << seed << ", " << rounds << " rounds of " << operations << " operations");
}
