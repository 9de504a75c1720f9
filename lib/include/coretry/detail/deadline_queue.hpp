#ifndef CORETRY_DETAIL_DEADLINE_QUEUE_HPP
#define CORETRY_DETAIL_DEADLINE_QUEUE_HPP

// Every attempt deadline of one execution context, kept on one timer.
//
// Arming an Asio timer per attempt costs a system call whenever the new
// expiry is the earliest (on Linux, timerfd_settime), and in a client that
// sends one request after another every new deadline is the earliest. This
// queue keeps the deadlines in an indexed binary heap (exact instants, no
// rounding) and keeps one timer of type Timer armed at the earliest of them:
//
// - adding a deadline re-arms the timer only when it moves the earliest
//   instant earlier than the one the timer is armed for;
// - removing one (the attempt finished first) never touches the timer while
//   others remain, and costs no system call;
// - when the last deadline goes, a real timer on an io_context is left armed
//   but no longer counted as work (so run() returns as it would without it),
//   and the next deadline, usually later than the armed instant, reuses it;
//   on virtual time (a timer with its own now()) or on any other execution
//   context the timer is cancelled instead;
// - when the timer fires, every deadline due by then expires, in instant
//   order and, among equal instants, in the order they were added; the timer
//   is re-armed at the next one.
//
// One queue serves the whole execution context and is guarded by a mutex:
// an attempt's deadline is added and removed on the attempt's strand, which
// on a multi-threaded io_context may run on any thread, while the timer's
// handler runs on yet another, so per-thread heaps would need a lock (or a
// message) for every removal anyway. The lock is held for a heap step only;
// no handler runs under it.
//
// Ownership: a queued entry stands for one counted reference of its owner.
// Expiry hands that reference to `expire` (outside the lock); a removal
// hands it back to the caller; the execution context's shutdown hands it to
// `abandon`, so an owner that is still queued when its io_context is
// destroyed is freed, never leaked.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace coretry::detail {

/// One deadline in a deadline_queue. It lives inside its owner; the queue
/// only links to it. Every field but `owner` and `on` belongs to the queue
/// and is read or written under its lock.
template <class TimePoint>
struct deadline_entry {
  static constexpr std::uint32_t not_queued = std::numeric_limits<std::uint32_t>::max();
  using expire_fn = void (*)(void* owner, unsigned generation);
  using abandon_fn = void (*)(void* owner);
  /// What the queue calls, the same for every entry of a kind (a constant).
  struct callbacks {
    expire_fn expire;   ///< the deadline passed: takes over the owner's reference
    abandon_fn abandon; ///< the context shuts down: gives the owner's reference back unrun
  };

  void* owner = nullptr;
  const callbacks* on = nullptr;

  TimePoint at{};
  std::uint64_t order = 0;       ///< among equal instants, first added expires first
  std::uint32_t index = not_queued; ///< position in the heap (32 bits: four billion deadlines at once)
  unsigned generation = 0;         ///< the owner's, as it was when added
};

template <class Timer>
class deadline_queue final : public boost::asio::execution_context::service {
public:
  using key_type = deadline_queue;
  using time_point = typename Timer::time_point;
  using entry = deadline_entry<time_point>;
  static inline boost::asio::execution_context::id id;

  explicit deadline_queue(boost::asio::execution_context& context)
      : boost::asio::execution_context::service(context) {}

  ~deadline_queue() override { destroyed.fetch_add(1, std::memory_order_release); }
  deadline_queue(const deadline_queue&) = delete;
  deadline_queue& operator=(const deadline_queue&) = delete;

  /// Queues of this type destroyed so far (with their execution contexts):
  /// while it has not moved, a context found at an address is the one whose
  /// queue was found there before (deadline_queue_of's cache).
  static inline std::atomic<std::uint64_t> destroyed{0};

  /// Makes the queue's timer, once, from `io`: an executor of this queue's
  /// own execution context (deadline_queue_of passes the caller's I/O
  /// executor, never a handler's, which may belong to another context).
  void bind(const boost::asio::any_io_executor& io) {
    if (bound_.load(std::memory_order_acquire)) return;
    std::lock_guard lock(mutex_);
    if (shut_down_ || timer_) return;
    // A timer on the io_context itself when there is one (never on a
    // caller's strand); else on the executor given, never counting work.
    io_context_ = io_context_of(io);
    if (io_context_ != nullptr)
      timer_.emplace(io_context_->get_executor());
    else
      timer_.emplace(boost::asio::prefer(io, boost::asio::execution::outstanding_work.untracked));
    bound_.store(true, std::memory_order_release);
  }

  /// The current time of the timer's clock (virtual time for a timer that
  /// keeps its own; the epoch once the context has shut down).
  time_point now() {
    if constexpr (keeps_own_time) {
      std::lock_guard lock(mutex_);
      return timer_ ? timer_->now() : time_point{};
    } else {
      return Timer::clock_type::now();
    }
  }

  /// How place() left an entry.
  enum class placed {
    added,   ///< it was not queued: the caller's new reference is the entry's
    moved,   ///< it was queued and keeps the reference it had
    refused, ///< the context has shut down: nothing is queued
  };

  /// Queues `e` to expire at `at`, or moves it there if it is queued
  /// already (one lock, and the armed timer is never given up in between).
  placed place(entry& e, time_point at, unsigned generation) {
    std::lock_guard lock(mutex_);
    if (shut_down_ || !timer_) return placed::refused;
    // Every index stays below not_queued (checked before anything changes).
    if (heap_.size() >= entry::not_queued - 1)
      throw std::length_error("coretry: more deadlines at once than a deadline queue indexes");
    const bool was_queued = e.index != entry::not_queued;
    if (was_queued) erase(e.index);
    e.at = at;
    e.order = next_order_++;
    e.generation = generation;
    e.index = static_cast<std::uint32_t>(heap_.size());
    heap_.push_back(&e);
    sift_up(e.index);
    if (uncounted_) {
      // The armed wait is work again: a deadline depends on it.
      io_context_->get_executor().on_work_started();
      uncounted_ = false;
    }
    if (heap_.front() == &e && (!armed_ || at < armed_at_)) arm(at);
    return was_queued ? placed::moved : placed::added;
  }

  /// Takes `e` out of the queue. True when it was queued: its reference is
  /// the caller's again. False when it had already expired (its `expire`
  /// has the reference) or was never added.
  bool remove(entry& e) {
    std::lock_guard lock(mutex_);
    if (e.index == entry::not_queued) return false;
    erase(e.index);
    if (heap_.empty()) idle();
    return true;
  }

  /// Deadlines queued now (for tests and benchmarks).
  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return heap_.size();
  }

  /// Waits queued on the timer so far: every one is a re-arm (a system call
  /// on a real timer); the coalescing is measured by how few there are.
  std::uint64_t arms() const {
    std::lock_guard lock(mutex_);
    return arms_;
  }

private:
  static constexpr bool keeps_own_time = requires(const Timer& t) { t.now(); };

  void shutdown() override {
    std::vector<entry*> queued;
    {
      std::lock_guard lock(mutex_);
      shut_down_ = true;
      queued.swap(heap_);
      for (entry* e : queued) e->index = entry::not_queued;
      // The pending wait (if any) is destroyed with the context's other
      // handlers; it must not be balanced or re-armed after this.
      uncounted_ = false;
      armed_ = false;
      // The timer goes now, while the services it uses still exist: they
      // were made after this queue, so they are destroyed before it. Its
      // destruction posts (never runs) the handler of a wait it cancels.
      timer_.reset();
    }
    for (entry* e : queued) e->on->abandon(e->owner);
  }

  // The io_context an executor (or the strand it is) runs on, if it does,
  // whatever blocking or relationship properties it carries.
  template <unsigned Bits = 0>
  static boost::asio::io_context* io_context_of_bits(const boost::asio::any_io_executor& ex) {
    using io_executor = boost::asio::io_context::basic_executor_type<std::allocator<void>, Bits>;
    if (const auto* io = ex.target<io_executor>()) return &io->context();
    if (const auto* s = ex.target<boost::asio::strand<io_executor>>()) return &s->get_inner_executor().context();
    if constexpr (Bits < 7) return io_context_of_bits<Bits + 1>(ex);
    return nullptr;
  }
  static boost::asio::io_context* io_context_of(const boost::asio::any_io_executor& ex) {
    if (auto* io = io_context_of_bits(ex)) return io;
    if (const auto* s = ex.target<boost::asio::strand<boost::asio::any_io_executor>>())
      return io_context_of(s->get_inner_executor());
    return nullptr;
  }

  // With mutex_ held: the last deadline has gone.
  void idle() {
    if (!armed_ || uncounted_) return;
    if (!keeps_own_time && io_context_ != nullptr) {
      // Keep the armed wait for the next deadline, which is usually later
      // than the armed instant and then costs nothing; it stops counting as
      // work, so that it keeps no run() from returning. Waits it replaced
      // may still be queued (their handlers just return): they count as
      // work until they have run, as any handler does. Cancelling here
      // instead would make the next deadline arm the timer again, and an
      // earlier one set after it (a hedge's after its attempt's) once more:
      // two waits pending at every idle, and so on for every operation.
      io_context_->get_executor().on_work_finished();
      uncounted_ = true;
      return;
    }
    timer_->cancel();
    armed_ = false;
  }

  // With mutex_ held: arm the timer at `at` (earlier than it was, if armed).
  void arm(time_point at) {
    timer_->expires_at(at); // cancels a pending wait, whose handler then just returns
    armed_ = true;
    armed_at_ = at;
    ++waits_;
    ++arms_;
    const std::uint64_t wait = ++wait_id_;
    timer_->async_wait([this, wait](boost::system::error_code ec) { on_wait(ec, wait); });
  }

  void on_wait(boost::system::error_code ec, std::uint64_t wait) {
    std::vector<expiry>& due = due_scratch();
    due.clear();
    {
      std::lock_guard lock(mutex_);
      --waits_;
      if (uncounted_ && wait == wait_id_) {
        // The uncounted wait ran: count it again for the moment, since the
        // io_context ends this handler's work when it returns.
        io_context_->get_executor().on_work_started();
        uncounted_ = false;
        armed_ = false;
        if (heap_.empty()) return;
      }
      if (shut_down_ || wait != wait_id_) return; // replaced by an earlier instant, or cancelled
      armed_ = false;
      if (ec) return; // cancelled when the last deadline went
      const time_point now = current_time();
      while (!heap_.empty() && heap_.front()->at <= now) {
        entry* e = heap_.front();
        erase(0);
        // The generation is read now: once the lock is gone the owner may
        // queue the entry again with another.
        due.push_back({e->owner, e->on->expire, e->generation});
      }
      if (!heap_.empty()) arm(heap_.front()->at);
    }
    // Outside the lock: each owner takes up its expiry on its own executor.
    for (const expiry& x : due) x.expire(x.owner, x.generation);
    due.clear();
  }

  time_point current_time() const {
    if constexpr (keeps_own_time)
      return timer_->now();
    else
      return Timer::clock_type::now();
  }

  // An entry taken from the heap because its instant came.
  struct expiry {
    void* owner;
    typename entry::expire_fn expire;
    unsigned generation;
  };

  // A scratch list per thread, so that an expiry allocates nothing once warm.
  static std::vector<expiry>& due_scratch() {
    thread_local std::vector<expiry> due;
    return due;
  }

  static bool before(const entry* a, const entry* b) {
    return a->at < b->at || (a->at == b->at && a->order < b->order);
  }
  void place(std::size_t i, entry* e) {
    heap_[i] = e;
    e->index = static_cast<std::uint32_t>(i);
  }
  void sift_up(std::size_t i) {
    entry* e = heap_[i];
    while (i > 0) {
      const std::size_t parent = (i - 1) / 2;
      if (!before(e, heap_[parent])) break;
      place(i, heap_[parent]);
      i = parent;
    }
    place(i, e);
  }
  void sift_down(std::size_t i) {
    entry* e = heap_[i];
    const std::size_t n = heap_.size();
    for (;;) {
      std::size_t child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && before(heap_[child + 1], heap_[child])) ++child;
      if (!before(heap_[child], e)) break;
      place(i, heap_[child]);
      i = child;
    }
    place(i, e);
  }
  void erase(std::size_t i) {
    entry* gone = heap_[i];
    gone->index = entry::not_queued;
    entry* last = heap_.back();
    heap_.pop_back();
    if (i == heap_.size()) return;
    place(i, last);
    if (i > 0 && before(last, heap_[(i - 1) / 2]))
      sift_up(i);
    else
      sift_down(i);
  }

  boost::asio::io_context* io_context_ = nullptr; ///< the timer's, when it runs on one
  std::atomic<bool> bound_{false};                ///< the timer has been made
  mutable std::mutex mutex_;
  std::optional<Timer> timer_;
  std::vector<entry*> heap_;
  std::uint64_t next_order_ = 0;
  std::uint64_t wait_id_ = 0; ///< of the latest wait queued on the timer
  std::uint64_t arms_ = 0;
  unsigned waits_ = 0;        ///< waits queued whose handlers have not run
  time_point armed_at_{};
  bool armed_ = false;        ///< the latest wait is pending and not cancelled
  bool uncounted_ = false;    ///< the latest wait is pending but not counted as work
  bool shut_down_ = false;
};

/// The deadline queue of the execution context the I/O executor `ex`
/// belongs to, its timer made from `ex` if it has none yet.
template <class Timer, class Executor>
deadline_queue<Timer>& deadline_queue_of(const Executor& ex) {
  // The latest context this thread asked about and its queue: looking a
  // service up takes the context's lock and compares type names.
  struct found {
    boost::asio::execution_context* context = nullptr;
    deadline_queue<Timer>* queue = nullptr;
    std::uint64_t destroyed = 0;
  };
  static thread_local found latest;
  boost::asio::execution_context& context = boost::asio::query(ex, boost::asio::execution::context);
  const std::uint64_t destroyed = deadline_queue<Timer>::destroyed.load(std::memory_order_acquire);
  if (latest.context != &context || latest.destroyed != destroyed)
    latest = {&context, &boost::asio::use_service<deadline_queue<Timer>>(context), destroyed};
  deadline_queue<Timer>& queue = *latest.queue;
  if constexpr (std::is_same_v<Executor, boost::asio::any_io_executor>)
    queue.bind(ex); // no copy: bind has nothing to do but once
  else
    queue.bind(boost::asio::any_io_executor(ex));
  return queue;
}

} // namespace coretry::detail

#endif
