#ifndef CORETRY_IMPL_ASYNC_RETRY_HPP
#define CORETRY_IMPL_ASYNC_RETRY_HPP

// The asynchronous layer: carries out the decision core's steps with a timer
// and cancellation slots. It decides nothing itself.

#include <coretry/detail/attempt_lanes.hpp>
#include <coretry/detail/attempt_runner.hpp>
#include <coretry/detail/caller_link.hpp>
#include <coretry/detail/counted_ref.hpp>
#include <coretry/detail/operation_executor.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <memory>
#include <optional>

namespace coretry::detail {

/// The cancellation types async_retry honours: terminal and partial. Total
/// cancellation (no side effects) cannot be promised by a retry, so an
/// emission of `total` alone is ignored, and a later `total` never undoes an
/// earlier terminal or partial request.
inline constexpr unsigned honoured_cancellation =
    static_cast<unsigned>(boost::asio::cancellation_type::terminal | boost::asio::cancellation_type::partial);

/// One retrying operation. It lives in memory from the completion handler's
/// associated allocator, in one block that holds hedging's state only when
/// its policy sends hedges, and the concurrency limit's only when it has a
/// limit. It is owned by the handlers it has outstanding
/// (counted references): freed when the last of them has run, or has been
/// destroyed unrun by a destroyed io_context, which then destroys the
/// caller's handler too. Its steps run on `strand_`; the caller's handler is
/// invoked through its own associated executor, on which work is counted
/// from the start until then, and only after the operation's memory is freed.
template <class Timer, class Factory, class Classifier, class T, class Handler>
class retry_op {
  using clock = typename Timer::clock_type;
  using handler_allocator = boost::asio::associated_allocator_t<Handler, boost::asio::recycling_allocator<void>>;
  // Its own block, in units of its alignment: from block_cache unless the
  // handler names an allocator (a template, so that it is looked at once the
  // class is complete).
  template <class Self = retry_op>
  using unit = block_unit<alignof(Self)>;
  template <class Self = retry_op>
  using own_allocator = block_allocator_for<handler_allocator, unit<Self>>;
  using handler_executor = boost::asio::associated_executor_t<Handler, boost::asio::any_io_executor>;
  using ref = counted_ref<retry_op>;
  using attempt_handler = owned_handler<retry_op>;
  friend class counted_ref<retry_op>;
  friend struct owned_handler<retry_op>;
  friend class caller_link_handler<retry_op>;

public:
  using allocator_type = handler_allocator;

  static void start(Handler&& handler, const boost::asio::any_io_executor& ex, const policy& p,
                    const retry_options& o, Factory&& factory, Classifier&& classify) {
    const handler_allocator handler_alloc(
        boost::asio::get_associated_allocator(handler, boost::asio::recycling_allocator<void>()));
    static_assert(alignof(hedge_part) <= alignof(retry_op) && alignof(permit_part) <= alignof(retry_op) &&
                  alignof(decision_core::extension) <= alignof(retry_op));
    const block_layout layout =
        layout_of(p.hedging.max_hedges > 0, decision_core::needs_extension(p), o.limit != nullptr);
    own_allocator<> alloc(handler_alloc);
    unit<>* block = std::allocator_traits<own_allocator<>>::allocate(alloc, layout.units);
    retry_op* op = reinterpret_cast<retry_op*>(block);
    try {
      ::new (op) retry_op(std::move(handler), ex, p, o, std::move(factory), std::move(classify), handler_alloc, layout);
    } catch (...) {
      std::allocator_traits<own_allocator<>>::deallocate(alloc, block, layout.units);
      throw;
    }
    op->launch();
  }

private:
  // Hedging's state: the hedges' lanes and the hedge timer.
  struct hedge_part {
    attempt_lanes::hedge_lanes lanes;
    deadline_entry<typename clock::time_point> wake; ///< when the next hedge is due
  };
  // The concurrency limit's: the operation's place in the limit's queue.
  // Under the limit's lock, a permit is offered; taken unless the operation
  // is already being freed. Then, outside it, on the thread that gave a
  // permit back: only a step posted to the strand.
  struct permit_part final : permit_waiter {
    explicit permit_part(retry_op& o) noexcept : op(o) {}
    ~permit_part() = default;
    bool accept_permit() noexcept override { return op.try_add_ref(); }
    void permit_granted() noexcept override {
      boost::asio::post(op.strand_, op.adopt_step([](retry_op& self) { self.permit_arrived(); }));
    }
    retry_op& op;
    duration wait_from{}; ///< when the latest wait for a permit began, from the start
    bool waiting = false; ///< in the limit's queue (or granted, the grant on its way)
  };
  // Where the parts are in the block (0: absent), and its size in units:
  // hedging's, the core's extension (hedging or an observed limit) and the
  // concurrency limit's.
  struct block_layout {
    std::size_t hedge = 0;
    std::size_t extension = 0;
    std::size_t permit = 0;
    std::size_t units = 0;
  };
  static constexpr std::size_t round_up(std::size_t n, std::size_t to) noexcept { return (n + to - 1) / to * to; }
  static constexpr block_layout layout_of(bool hedging, bool extended, bool limited) noexcept {
    block_layout l;
    std::size_t size = sizeof(retry_op);
    if (hedging) {
      l.hedge = size = round_up(size, alignof(hedge_part));
      size += sizeof(hedge_part);
    }
    if (extended) {
      l.extension = size = round_up(size, alignof(decision_core::extension));
      size += sizeof(decision_core::extension);
    }
    if (limited) {
      l.permit = size = round_up(size, alignof(permit_part));
      size += sizeof(permit_part);
    }
    l.units = round_up(size, sizeof(unit<>)) / sizeof(unit<>);
    return l;
  }

  // A step of the operation, posted or dispatched to the strand.
  template <class Step>
  struct step_handler {
    using allocator_type = handler_allocator;
    allocator_type get_allocator() const noexcept { return op->alloc_; }
    void operator()() {
      ref self(std::move(op));
      step(*self);
      self.done();
    }
    ref op;
    Step step;
  };
  template <class Step>
  step_handler<Step> make_step(Step step) {
    return step_handler<Step>{ref(this), std::move(step)};
  }
  // A step that takes over a reference the operation already counts.
  template <class Step>
  step_handler<Step> adopt_step(Step step) {
    return step_handler<Step>{ref::adopt(this), std::move(step)};
  }

  retry_op(Handler&& handler, const boost::asio::any_io_executor& ex, const policy& p, const retry_options& o,
           Factory&& factory, Classifier&& classify, const handler_allocator& alloc, const block_layout& layout)
      : handler_(std::move(handler)),
        work_(boost::asio::get_associated_executor(handler_, ex)),
        strand_(make_operation_strand(boost::asio::get_associated_executor(handler_, ex), ex)),
        deadlines_(deadline_queue_of<Timer>(ex)),
        tracker_(o.tracker),
        observer_(o.observer),
        operation_(o.operation),
        cancellation_repeat_(o.cancellation_repeat),
        core_(p, o.random ? *o.random : independent_random::instance(), o.budget, o.gate, o.limit,
              layout.extension != 0 ? reinterpret_cast<unsigned char*>(this) + layout.extension : nullptr),
        factory_(std::move(factory)),
        classify_(std::move(classify)),
        alloc_(alloc) {
    units_ = static_cast<std::uint32_t>(layout.units);
    safety_ = o.safety;
    // Room for the attempts that may run at once: a record more is made as
    // a retry starts, so that an operation asleep in its backoff holds only
    // the records of the attempts it has made.
    const unsigned at_once = p.hedging.max_hedges + 1;
    result_.records.reserve(p.max_attempts < at_once ? p.max_attempts : at_once);
    wake_.owner = this;
    wake_.expire = [](void* self, unsigned generation) {
      auto& op = *static_cast<retry_op*>(self);
      boost::asio::post(op.strand_, op.adopt_step([generation](retry_op& o) { o.on_wake(generation); }));
    };
    wake_.abandon = [](void* self) { static_cast<retry_op*>(self)->release(false); };
    if (layout.hedge != 0) {
      hedge_ = ::new (static_cast<void*>(reinterpret_cast<unsigned char*>(this) + layout.hedge)) hedge_part();
      lanes_.attach(&hedge_->lanes);
      hedge_->wake.owner = this;
      hedge_->wake.expire = [](void* self, unsigned) {
        auto& op = *static_cast<retry_op*>(self);
        boost::asio::post(op.strand_, op.adopt_step([](retry_op& o) { o.consider_hedge(); }));
      };
      hedge_->wake.abandon = [](void* self) { static_cast<retry_op*>(self)->release(false); };
    }
    if (layout.permit != 0)
      permit_ = ::new (static_cast<void*>(reinterpret_cast<unsigned char*>(this) + layout.permit)) permit_part(*this);
    // The caller emits from its handler's executor: when that is the
    // strand, the slot may be cleared from the operation's steps.
    if constexpr (std::is_convertible_v<handler_executor, boost::asio::any_io_executor>)
      clear_in_place_ = boost::asio::any_io_executor(boost::asio::get_associated_executor(handler_, ex)) == strand_;
  }

  ~retry_op() {
    // Destroyed unrun (its io_context went away), perhaps on another thread
    // than the caller's: the handler in the caller's slot must never reach
    // here again, and the slot is not touched from here.
    caller_.detach();
    // Probe tickets and permits of attempts that never ended go back.
    for (std::size_t i = 0; i < lanes_.size(); ++i)
      if (lanes_[i].busy) {
        core_.probe_over(std::exchange(lanes_[i].probe, 0));
        core_.permit_over(decided_at_, duration::zero(), limit_signal::ignored);
      }
    // A wait for a permit that never ended: out of the queue, and a permit
    // granted meanwhile goes back.
    if (permit_ && permit_->waiting &&
        core_.limit()->cancel_wait(*permit_, false) == concurrency_limit::cancel_result::granted)
      core_.permit_over(decided_at_, duration::zero(), limit_signal::ignored);
    if (hedge_) hedge_->~hedge_part();
    if (permit_) permit_->~permit_part();
  }

  // What each attempt's runner completes to (owned_handler): the strand,
  // the operation's own signal for the attempt's lane, the handler's allocator.
  const boost::asio::any_io_executor& executor() const noexcept { return strand_; }
  boost::asio::cancellation_slot inner_slot(std::size_t lane) noexcept { return lanes_[lane].signal.slot(); }
  const handler_allocator& allocator() const noexcept { return alloc_; }
  void on_completion(std::size_t lane, attempt_completion<T> done) { on_attempt(lane, std::move(done)); }
  bool hedging() const noexcept { return hedge_ != nullptr; }

  void add_ref() noexcept { references_.fetch_add(1, std::memory_order_relaxed); }
  // A reference for an emission of the caller's, unless the operation is
  // already being freed.
  bool try_add_ref() noexcept {
    int n = references_.load(std::memory_order_relaxed);
    while (n > 0)
      if (references_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) return true;
    return false;
  }

  // `post`: given back by the initiating call, where the handler must not run.
  // A handler that throws throws out of here, to whoever ran the last step.
  void release(bool ran, bool post = false) {
    if (references_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    // Nothing of the operation is outstanding any more: free it first, then
    // call the handler (if the operation finished; a destroyed io_context
    // destroys it unrun instead).
    Handler handler(std::move(handler_));
    auto work = std::move(work_);
    const bool finished = finished_ && ran;
    std::exception_ptr exception = std::move(exception_);
    outcome<T> result = std::move(result_);
    own_allocator<> alloc(alloc_);
    const std::size_t units = units_;
    this->~retry_op();
    std::allocator_traits<own_allocator<>>::deallocate(alloc, reinterpret_cast<unit<>*>(this), units);
    if (!finished) return;
    // Bound to the handler's own executor, so that it goes there in one step
    // (dispatch or post with an executor of the same type would go through
    // that executor first, then the handler's).
    auto completion = boost::asio::bind_executor(
        work.executor(), boost::asio::append(std::move(handler), std::move(exception), std::move(result)));
    if (post)
      boost::asio::post(std::move(completion));
    else
      boost::asio::dispatch(std::move(completion));
    // `work` goes out of scope here: the handler has been called or queued.
  }

  typename clock::time_point now() const { return deadlines_.now(); }
  duration elapsed() const { return now() - start_; }
  bool cancel_requested() const noexcept { return requested_.load(std::memory_order_acquire) != 0; }

  // The caller's emission (caller_link), on the caller's executor. The
  // request is recorded at once (so that it is honoured whenever it comes,
  // even before the first step) and acted on from the strand.
  bool accept_caller_cancellation(boost::asio::cancellation_type type) noexcept {
    const unsigned honoured = static_cast<unsigned>(type) & honoured_cancellation;
    if (honoured == 0 || !try_add_ref()) return false;
    requested_.fetch_or(honoured, std::memory_order_acq_rel);
    return true;
  }
  void act_on_caller_cancellation() {
    boost::asio::post(strand_, adopt_step([](retry_op& op) { op.on_cancel(); }));
  }

  // Initiation: runs in the caller's call to async_retry.
  void launch() {
    ref self(this);
    caller_.attach(boost::asio::get_associated_cancellation_slot(handler_), this);
    start_ = now();
    const auto origin = std::chrono::duration_cast<duration>(start_.time_since_epoch());
    const std::optional<latency_snapshot> observed = observe(origin);
    const decision first = core_.begin(origin, observed ? &*observed : nullptr);
    if (first.what == decision::action::stop) {
      // Never complete inside the initiating call: finish from the strand.
      const stop_reason reason = first.reason;
      boost::asio::post(strand_, make_step([reason](retry_op& op) { op.finish(reason); }));
      self.done(true);
      return;
    }
    // The first attempt starts on the strand (at once when the caller already
    // runs there): started from any other thread, its completion could run on
    // the strand while this call was still arming its deadline.
    boost::asio::dispatch(strand_, make_step([first](retry_op& op) {
                            if (op.cancel_requested()) {
                              op.core_.attempt_not_started(duration::zero());
                              return op.finish(stop_reason::cancelled);
                            }
                            op.act(first);
                          }));
    // On a multi-threaded context the whole operation may end on other
    // threads before this call returns: if this reference is then the last,
    // the handler is posted, never called inside the initiating call.
    self.done(true);
  }

  // The tracker's snapshot at `at` (time since the clock's epoch), when the
  // policy takes its limit from it.
  std::optional<latency_snapshot> observe(duration at) const {
    const std::optional<double> percentile = core_.observed_percentile();
    if (!percentile || !tracker_) return std::nullopt;
    return tracker_->snapshot(*percentile, at);
  }

  // Tells the tracker how the attempt of `record` ended.
  void record_latency(const attempt_record& record) const noexcept {
    if (!tracker_) return;
    const latency_result result = latency_result_of(record);
    tracker_->record(result, result == latency_result::timeout ? record.allowance : record.end - record.start,
                             detail::saturating_add(core_.origin(), record.end));
  }

  void on_cancel() {
    switch (phase_) {
    case phase::attempting:
      // Any cancellation becomes terminal for the attempts: they are
      // abandoned, so their I/O must stop and their connections may not be
      // reused. A runner never completes inside this emission. No hedge
      // follows.
      cancel_hedge_timer();
      lanes_.cancel_all();
      break;
    case phase::sleeping: wake_early(); break;
    case phase::waiting_permit:
      // Out of the queue, unless a permit is already on its way (its step
      // then sees the request).
      if (core_.limit()->cancel_wait(*permit_, false) == concurrency_limit::cancel_result::granted) break;
      permit_->waiting = false;
      if (deadlines_.remove(wake_)) release(true);
      report_permit_wait(false);
      core_.permit_wait_cancelled(elapsed(), false);
      finish(stop_reason::cancelled);
      break;
    case phase::starting: // the first step looks at the request
    case phase::deciding: // the next step looks at the request
    case phase::done: break;
    }
  }

  void act(const decision& d) {
    switch (d.what) {
    case decision::action::start_attempt:
      return start_attempt(d.allowance, core_.attempts() == 1 ? attempt_kind::first : attempt_kind::retry);
    case decision::action::sleep: return sleep(d);
    case decision::action::stop: return finish(d.reason);
    case decision::action::wait_permit: return wait_for_permit(d.wait);
    case decision::action::wind_down: return wind_down();
    case decision::action::hedge: return consider_hedge();
    case decision::action::none: return;
    }
  }

  // The concurrency limit had no permit free: wait in its queue, at most
  // `wait` (an entry in the context's deadline queue, holding a reference).
  void wait_for_permit(duration wait) {
    switch (core_.limit()->wait(*permit_)) {
    case concurrency_limit::wait_result::acquired: return permit_arrived();
    case concurrency_limit::wait_result::refused: return act(core_.permit_refused());
    case concurrency_limit::wait_result::queued: break;
    }
    phase_ = phase::waiting_permit;
    permit_->waiting = true;
    permit_->wait_from = elapsed();
    add_ref();
    if (deadlines_.place(wake_, saturating_instant(now(), wait), ++wake_generation_) !=
        deadline_queue<Timer>::placed::added) {
      // The execution context has shut down: nothing will run again.
      if (core_.limit()->cancel_wait(*permit_, false) == concurrency_limit::cancel_result::removed)
        permit_->waiting = false;
      release(true);
      return;
    }
    if (cancel_requested()) on_cancel();
  }

  // A permit for the attempt the core is waiting to start.
  void permit_arrived() {
    if (permit_->waiting) {
      permit_->waiting = false;
      if (deadlines_.remove(wake_)) release(true);
      report_permit_wait(true);
    }
    decided_at_ = elapsed();
    if (cancel_requested()) {
      core_.permit_wait_cancelled(decided_at_, true);
      return finish(stop_reason::cancelled);
    }
    const std::optional<latency_snapshot> observed = observe(detail::saturating_add(core_.origin(), decided_at_));
    act(core_.permit_granted(decided_at_, observed ? &*observed : nullptr));
  }

  // The wait for a permit ended without one, unless one is on its way.
  void on_permit_wait_over() {
    const bool cancelled = cancel_requested(); // its step may come after this one: the caller's request wins
    if (core_.limit()->cancel_wait(*permit_, !cancelled) == concurrency_limit::cancel_result::granted) return;
    permit_->waiting = false;
    report_permit_wait(false);
    decided_at_ = elapsed();
    if (cancelled) {
      core_.permit_wait_cancelled(decided_at_, false);
      return finish(stop_reason::cancelled);
    }
    act(core_.permit_refused());
  }

  void report_permit_wait(bool granted) {
    if (observer_)
      observer_->permit_waited(
          {operation_, core_.attempts() + 1, permit_->wait_from, elapsed() - permit_->wait_from, granted});
  }

  // The wake-up entry fired: the end of a sleep, or of a wait for a permit.
  // One placed before the latest placement is stale.
  void on_wake(unsigned generation) {
    if (generation != wake_generation_) return;
    if (phase_ == phase::sleeping) return on_sleep({});
    if (phase_ == phase::waiting_permit && permit_->waiting) return on_permit_wait_over();
  }

  void start_attempt(duration allowance, attempt_kind kind, std::uint64_t probe = 0) {
    // The attempt starts at the instant the core decided it, so the time the
    // core granted is measured from there: an attempt never runs past
    // min(attempt limit, deadline - reserve), however late this code runs.
    const duration at = decided_at_;
    const auto now = saturating_instant(start_, at);
    const std::size_t index = result_.records.size();
    attempt_record& record = result_.records.emplace_back();
    record.number = core_.attempts();
    record.kind = kind;
    record.wait_before = next_wait_;
    record.wait_from = kind == attempt_kind::hedge ? wait_source::none : next_wait_source_;
    record.start = at;
    record.allowance = allowance;
    result_.attempts = record.number;
    next_wait_ = duration::zero();
    if (observer_)
      observer_->attempt_started(
          {operation_, record.number, at, allowance, core_.attempt_limit(), kind});

    const duration deadline = core_.overall_deadline();
    const attempt_context<clock> context{record.number, saturating_instant(now, allowance), allowance,
                                         deadline == duration::max() ? duration::max() : deadline - at};
    std::optional<decltype(factory_(context))> op;
    try {
      op.emplace(factory_(context));
    } catch (...) {
      exception_ = std::current_exception();
      core_.probe_over(probe);
      core_.attempt_not_started(at);
      // A hedge's factory: the attempts in flight are wound down first, and
      // the last to finish delivers the exception.
      if (lanes_.in_flight() > 0) return wind_down();
      // The first attempt may be created inside the initiating call, where
      // the caller's handler must not run: deliver the exception from the strand.
      boost::asio::post(strand_, make_step([](retry_op& self) { self.fail(); }));
      return;
    }
    phase_ = phase::attempting;
    core_.attempt_started(); // its permit, if any, is now the lane's
    // With hedging, the gate's probe ticket goes with the attempt that
    // carries it, and is given back when that attempt ends.
    if (hedging() && kind != attempt_kind::hedge) probe = core_.take_probe();
    const std::size_t lane = lanes_.acquire(index, probe);
    run_attempt<T>(deadlines_, context.deadline, cancellation_repeat_, repeat_bound(context.deadline),
                   stuck_report{&retry_op::report_stuck, this}, strand_, std::move(*op),
                   attempt_handler{ref(this), lane});
    // A cancellation requested while the attempt was being set up.
    if (cancel_requested() && phase_ == phase::attempting) return on_cancel();
    if (hedging() && kind != attempt_kind::hedge) consider_hedge();
  }

  // Hedging (coretry/detail/attempt_lanes.hpp holds the lanes): sends the
  // hedge the core says is due now, or arms the timer for when it will be.
  // Nothing is launched once a result has been taken, the caller has
  // cancelled or the attempts are being wound down.
  void consider_hedge() {
    if (phase_ != phase::attempting || core_.stopping() || exception_ || cancel_requested()) return;
    const duration at = elapsed();
    const duration now = detail::saturating_add(core_.origin(), at);
    const std::optional<latency_snapshot> observed = observe(now);
    const std::optional<double> percentile = core_.hedge_delay_percentile();
    const std::optional<latency_snapshot> hedge_observed =
        percentile && tracker_ ? std::optional{tracker_->snapshot(*percentile, now)} : std::nullopt;
    const hedge_decision h = core_.next_hedge(at, lanes_.in_flight(), observed ? &*observed : nullptr,
                                              hedge_observed ? &*hedge_observed : nullptr);
    switch (h.what) {
    case hedge_decision::action::send:
      decided_at_ = at;
      report_hedge(hedge_result::sent, core_.attempts(), at);
      start_attempt(h.allowance, attempt_kind::hedge, h.probe);
      return consider_hedge(); // the next one, if there is room for it
    case hedge_decision::action::wait: return arm_hedge_timer(h.at);
    case hedge_decision::action::none: return;
    case hedge_decision::action::refused_budget:
    case hedge_decision::action::refused_gate:
    case hedge_decision::action::refused_limit:
      // Simply not sent: the attempts in flight go on, and no other hedge
      // is tried until one of them fails.
      report_hedge(h.what == hedge_decision::action::refused_budget ? hedge_result::refused_budget
                   : h.what == hedge_decision::action::refused_gate ? hedge_result::refused_gate
                                                                    : hedge_result::refused_limit,
                   core_.attempts() + 1, at);
      return;
    }
  }

  void report_hedge(hedge_result what, unsigned attempt, duration at) {
    if (observer_) observer_->hedge({operation_, what, attempt, at, core_.hedge_delay()});
  }

  // The hedge timer is an entry in the context's deadline queue, holding a
  // reference while queued.
  void arm_hedge_timer(duration at) {
    add_ref();
    if (deadlines_.place(hedge_->wake, saturating_instant(start_, at), 0) != deadline_queue<Timer>::placed::added)
      release(true); // moved (it keeps the reference it had) or refused (shut down)
  }
  void cancel_hedge_timer() {
    if (hedge_ && deadlines_.remove(hedge_->wake)) release(true);
  }

  // Ends the attempts in flight (terminal cancellation); the last one to
  // finish concludes the operation.
  void wind_down() {
    cancel_hedge_timer();
    lanes_.cancel_all();
  }

  void conclude() {
    if (exception_) return fail();
    finish(*core_.stopping());
  }

  // How many times a cancelled attempt's cancellation is sent again before
  // it counts as stuck: until the overall deadline (the attempt's own when
  // there is none) and a few repeats beyond it.
  unsigned repeat_bound(typename clock::time_point attempt_deadline) const {
    constexpr unsigned beyond = 3;
    const duration repeat = cancellation_repeat_;
    if (repeat <= duration::zero()) return 0;
    const duration overall = core_.overall_deadline();
    if (overall == duration::max()) return beyond;
    const auto end = saturating_instant(start_, overall);
    if (end <= attempt_deadline) return beyond;
    const auto until_end = std::chrono::duration_cast<duration>(end - attempt_deadline);
    const auto repeats = until_end / repeat;
    return repeats > 1'000'000 ? 1'000'000u + beyond : static_cast<unsigned>(repeats) + beyond;
  }

  static void report_stuck(void* context) {
    auto& self = *static_cast<retry_op*>(context);
    if (self.observer_)
      self.observer_->attempt_stuck({self.operation_, self.core_.attempts(), self.elapsed()});
  }

  void on_attempt(std::size_t lane, attempt_completion<T>&& done) {
    const std::size_t index = lanes_[lane].record;
    const std::uint64_t probe = lanes_[lane].probe;
    lanes_.release(lane);
    const bool last = lanes_.in_flight() == 0;
    if (core_.stopping() || exception_) return on_wound_down(index, probe, std::move(done), last);
    if (last) phase_ = phase::deciding;
    if (done.exception) {
      exception_ = std::move(done.exception);
      core_.probe_over(probe);
      core_.permit_over(elapsed(), duration::zero(), limit_signal::ignored);
      if (!last) return wind_down();
      return fail();
    }
    attempt_record& record = result_.records[index];
    record.end = elapsed();
    record.error = done.error;
    result_.last_error = done.error;
    result_.value = std::move(done.value);
    if (result_.value) record.connection = connection_of<T>::get(*result_.value);
    try {
      record.classified = classify_(static_cast<const boost::system::error_code&>(done.error),
                                    static_cast<const T&>(*result_.value));
    } catch (...) {
      // As a throwing factory: the probe goes back, the other attempts are
      // wound down, and the last to finish delivers the exception.
      exception_ = std::current_exception();
      core_.probe_over(probe);
      core_.permit_over(record.end, duration::zero(), limit_signal::ignored);
      if (!last) return wind_down();
      return fail();
    }
    // An attempt ended by the caller's cancellation says so, whatever error
    // its operations reported on the way out; one that succeeded stands.
    const bool cancelled = record.classified.status != attempt_status::success && cancel_requested();
    if (cancelled) record.classified = verdict::permanent("cancelled", delivery::unknown);
    if (observer_) observer_->attempt_finished({operation_, record});
    core_.probe_over(probe);
    // A timeout at the overall deadline, before the attempt's own limit,
    // says only that the operation ran out of time.
    core_.permit_over(record.end, record.end - record.start,
                      limit_signal_of(record.classified, done.error == attempt_error::timed_out, cancelled,
                                      record.allowance < core_.attempt_limit()));
    // The others, if any, have been told of the caller's cancellation already.
    if (cancelled) return act(core_.attempt_cancelled(lanes_.in_flight()));
    record_latency(record);
    if (last) cancel_hedge_timer();
    const decision d = core_.attempt_finished(record.end, record.classified, safety_, lanes_.in_flight());
    if ((d.what == decision::action::stop || d.what == decision::action::wind_down) &&
        d.reason == stop_reason::succeeded)
      take_winner(record);
    act(d);
  }

  void take_winner(const attempt_record& record) {
    result_.winner = record.number;
    if (record.kind == attempt_kind::hedge) report_hedge(hedge_result::won, record.number, record.end);
  }

  // An attempt that finished after the operation had decided to stop (a
  // hedge that lost, or one wound down after a failure or the caller's
  // cancellation): recorded, never classified, never told to the gate, and
  // its value is not taken.
  void on_wound_down(std::size_t index, std::uint64_t probe, attempt_completion<T>&& done, bool last) {
    core_.probe_over(probe);
    attempt_record& record = result_.records[index];
    record.end = elapsed();
    core_.permit_over(record.end, record.end - record.start, limit_signal::ignored);
    record.error = done.error;
    record.superseded = core_.stopping() == stop_reason::succeeded;
    if (done.value) record.connection = connection_of<T>::get(*done.value);
    record.classified = verdict::permanent(record.superseded ? "superseded" : "cancelled", delivery::unknown);
    if (observer_) observer_->attempt_finished({operation_, record});
    if (last) conclude();
  }

  void sleep(const decision& d) {
    // A wait at the retry gate follows the backoff: the attempt's record
    // shows the whole wait before it, from the source that ended it.
    next_wait_ += d.wait;
    next_wait_source_ = d.source;
    result_.total_backoff += d.wait;
    if (observer_)
      observer_->backoff_scheduled({operation_, core_.attempts() + 1, elapsed(), d.wait, d.source});
    phase_ = phase::sleeping;
    // The wake-up is a deadline in the context's queue, holding a reference.
    add_ref();
    if (deadlines_.place(wake_, saturating_instant(now(), d.wait), ++wake_generation_) !=
        deadline_queue<Timer>::placed::added) {
      // The execution context has shut down: nothing will run again.
      release(true);
      return;
    }
    // A cancellation requested before the wake-up was queued.
    if (cancel_requested()) wake_early();
  }

  // Ends the sleep now, as cancelled: unless the wake-up has already been
  // taken from the queue (it is then on its way and sees the request).
  void wake_early() {
    if (!deadlines_.remove(wake_)) return;
    boost::asio::post(strand_, adopt_step([](retry_op& op) { op.on_sleep(boost::asio::error::operation_aborted); }));
  }

  void on_sleep(boost::system::error_code ec) {
    // Cancellation is re-checked after every sleep, before any new attempt.
    if (ec || cancel_requested()) return finish(stop_reason::cancelled);
    decided_at_ = elapsed();
    const std::optional<latency_snapshot> observed = observe(detail::saturating_add(core_.origin(), decided_at_));
    act(core_.sleep_finished(decided_at_, observed ? &*observed : nullptr));
  }

  void finish(stop_reason reason) {
    result_.reason = reason;
    result_.attempts = static_cast<unsigned>(result_.records.size());
    result_.elapsed = elapsed();
    if (observer_)
      observer_->stopped({operation_, reason, result_.attempts, result_.elapsed, result_.total_backoff});
    end();
  }

  void fail() {
    result_.attempts = static_cast<unsigned>(result_.records.size());
    end();
  }

  // The handler is called once the last reference is gone (release).
  void end() {
    cancel_hedge_timer();
    phase_ = phase::done;
    finished_ = true;
    if (clear_in_place_) caller_.detach_and_clear();
    else caller_.detach();
  }

  enum class phase : unsigned char { starting, attempting, deciding, sleeping, waiting_permit, done };

  Handler handler_;
  handler_work<handler_executor> work_;
  boost::asio::any_io_executor strand_;
  deadline_queue<Timer>& deadlines_; ///< the attempts' deadlines and the backoff's wake-up, shared by the context
  deadline_entry<typename clock::time_point> wake_; ///< the end of the backoff
  latency_tracker* tracker_;
  retry_observer* observer_;
  std::string_view operation_;
  duration cancellation_repeat_;
  decision_core core_;
  Factory factory_;
  Classifier classify_;
  [[no_unique_address]] handler_allocator alloc_; ///< the allocator of its handlers
  outcome<T> result_;
  std::exception_ptr exception_;
  typename Timer::time_point start_{};
  duration next_wait_{};
  duration decided_at_{}; ///< when the core last decided, from the start
  attempt_lanes lanes_; ///< the attempts in flight (one without hedging)
  caller_link<retry_op> caller_; ///< the handler in the caller's cancellation slot
  hedge_part* hedge_ = nullptr;   ///< in the block after the operation: with hedging only
  permit_part* permit_ = nullptr; ///< in the block after the operation: with a concurrency limit only
  std::atomic<unsigned> requested_{0}; ///< honoured cancellation types the caller asked for
  std::atomic<int> references_{0};
  unsigned wake_generation_ = 0; ///< of the latest placement of wake_
  std::uint32_t units_ = 0;      ///< the block's size, in units of its alignment
  repeat_safety safety_ = repeat_safety::unsafe;
  wait_source next_wait_source_ = wait_source::none;
  phase phase_ = phase::starting;
  bool finished_ = false;
  bool clear_in_place_ = false; ///< the caller emits from the strand
};

/// The operation's initiation: checks nothing (async_retry has), allocates
/// the operation with the handler's allocator and launches it.
template <class Timer, class Factory, class Classifier, class T>
struct initiate_retry {
  template <class Handler>
  void operator()(Handler&& handler, const boost::asio::any_io_executor& ex, const policy& p,
                  const retry_options& o, Factory factory, Classifier classify) const {
    std::decay_t<Handler> owned(std::forward<Handler>(handler)); // a callback passed as an lvalue is copied
    retry_op<Timer, Factory, Classifier, T, std::decay_t<Handler>>::start(std::move(owned), ex, p, o,
                                                                          std::move(factory), std::move(classify));
  }
};

} // namespace coretry::detail

#endif
