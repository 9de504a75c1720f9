#ifndef CORETRY_IMPL_RETRY_OP_HPP
#define CORETRY_IMPL_RETRY_OP_HPP

// One retrying operation: its block (the operation, then the parts its
// policy and options need), its ownership by counted references, and its
// state. What it does is defined in impl/retry_steps.hpp (carrying out the
// decision core's answers) and impl/retry_attempts.hpp (attempts and
// hedges, each on a lane).

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
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <type_traits>

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
  // Where a part is in the block: 16 bits when what the caller's types bring
  // (handler, result, factory, classifier) leaves the block well under
  // 64 KiB, as it almost always does; 32 bits for a large result or handler.
  using part_offset = std::conditional_t<(sizeof(Handler) + sizeof(outcome<T>) + sizeof(Factory) +
                                          sizeof(Classifier)) <= 0x7fff,
                                         std::uint16_t, std::uint32_t>;
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
    static_assert(layout_of(true, true, true).units * sizeof(unit<>) <= std::numeric_limits<part_offset>::max(),
                  "parts within reach of their offsets");
    const block_layout layout =
        layout_of(p.hedging.max_hedges > 0, decision_core::needs_extension(p), o.limit != nullptr);
    const handler_executor handler_ex(boost::asio::get_associated_executor(handler, ex));
    own_allocator<> alloc(handler_alloc);
    unit<>* block = std::allocator_traits<own_allocator<>>::allocate(alloc, layout.units);
    retry_op* op = reinterpret_cast<retry_op*>(block);
    try {
      ::new (op) retry_op(std::move(handler), handler_ex, ex, p, o, std::move(factory), std::move(classify),
                          handler_alloc, layout);
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

  // `handler_ex`: the handler's associated executor (`ex` when it has none).
  // async_retry has checked `p` (retry_setup_problem): the core does not
  // check it again.
  retry_op(Handler&& handler, const handler_executor& handler_ex, const boost::asio::any_io_executor& ex,
           const policy& p, const retry_options& o, Factory&& factory, Classifier&& classify,
           const handler_allocator& alloc, const block_layout& layout)
      : handler_(std::move(handler)),
        work_(handler_ex),
        strand_(make_operation_strand(handler_ex, ex, &clear_in_place_)),
        deadlines_(deadline_queue_of<Timer>(ex)),
        tracker_(o.tracker),
        observer_(o.observer),
        operation_(o.operation),
        cancellation_repeat_(o.cancellation_repeat),
        core_(decision_core::checked_policy{}, p, o.random ? *o.random : independent_random::instance(), o.budget,
              o.gate, o.limit,
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
    using entry_callbacks = typename deadline_entry<typename clock::time_point>::callbacks;
    static constexpr auto abandon = [](void* self) { static_cast<retry_op*>(self)->release(false); };
    static constexpr entry_callbacks wake_on{[](void* self, unsigned generation) {
                                               auto& op = *static_cast<retry_op*>(self);
                                               boost::asio::post(op.strand_, op.adopt_step([generation](retry_op& o) {
                                                                   o.on_wake(generation);
                                                                 }));
                                             },
                                             abandon};
    wake_.owner = this;
    wake_.on = &wake_on;
    if (layout.hedge != 0) {
      hedge_at_ = static_cast<part_offset>(layout.hedge);
      ::new (static_cast<void*>(reinterpret_cast<unsigned char*>(this) + layout.hedge)) hedge_part();
      lanes_.attach(&hedge()->lanes);
      static constexpr entry_callbacks hedge_on{[](void* self, unsigned) {
                                                  auto& op = *static_cast<retry_op*>(self);
                                                  boost::asio::post(op.strand_, op.adopt_step([](retry_op& o) {
                                                                      o.consider_hedge();
                                                                    }));
                                                },
                                                abandon};
      hedge()->wake.owner = this;
      hedge()->wake.on = &hedge_on;
    }
    if (layout.permit != 0) {
      permit_at_ = static_cast<part_offset>(layout.permit);
      ::new (static_cast<void*>(reinterpret_cast<unsigned char*>(this) + layout.permit)) permit_part(*this);
    }
  }

  ~retry_op() {
    // Destroyed unrun (its io_context went away), perhaps on another thread
    // than the caller's: the handler in the caller's slot must never reach
    // here again, and the slot is not touched from here.
    caller_.detach();
    // Probe tickets and permits of attempts that never ended go back.
    for (std::size_t i = 0; i < lanes_.size(); ++i)
      if (lanes_[i].busy) {
        attempt_end e;
        e.elapsed = e.started = decided_at_;
        e.probe = lanes_[i].probe;
        core_.attempt_abandoned(e);
      }
    // A wait for a permit that never ended: out of the queue, and a permit
    // granted meanwhile goes back (as after a cancellation).
    if (permit() && core_.waiting_for_permit() &&
        core_.limit()->cancel_wait(*permit(), false) == concurrency_limit::cancel_result::granted) {
      core_.caller_cancelled(decided_at_, 0);
      core_.permit_granted(decided_at_);
    }
    if (hedge_part* h = hedge()) h->~hedge_part();
    if (permit_part* w = permit()) w->~permit_part();
  }

  // What each attempt's runner completes to (owned_handler): the strand,
  // the operation's own signal for the attempt's lane, the handler's allocator.
  const boost::asio::any_io_executor& executor() const noexcept { return strand_; }
  boost::asio::cancellation_slot inner_slot(std::size_t lane) noexcept { return lanes_[lane].signal.slot(); }
  const handler_allocator& allocator() const noexcept { return alloc_; }
  void on_completion(std::size_t lane, attempt_completion<T> done) { on_attempt(lane, std::move(done)); }
  bool hedging() const noexcept { return hedge_at_ != 0; }
  // The parts in the block after the operation, if there: at offsets from
  // its start, where pointers would take 16 bytes.
  template <class Part>
  Part* part_at(part_offset offset) noexcept {
    return offset == 0 ? nullptr
                       : std::launder(reinterpret_cast<Part*>(reinterpret_cast<unsigned char*>(this) + offset));
  }
  hedge_part* hedge() noexcept { return part_at<hedge_part>(hedge_at_); }
  permit_part* permit() noexcept { return part_at<permit_part>(permit_at_); }

  void add_ref() noexcept { references_.add(); }
  // A reference for an emission of the caller's, unless it is already being freed.
  bool try_add_ref() noexcept { return references_.try_add(); }

  // `post`: given back by the initiating call, where the handler must not run.
  // A handler that throws throws out of here, to whoever ran the last step.
  void release(bool ran, bool post = false) {
    if (!references_.drop()) return;
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
    if constexpr (std::is_same_v<std::decay_t<decltype(work.executor())>, boost::asio::any_io_executor>)
      if (!post && dispatches_in_place(work.executor())) {
        // As dispatch would, exceptions too: one the handler throws leaves
        // the io_context's run() (posted there to be thrown again), not the
        // attempt's completion that called this.
        try {
          std::move(handler)(std::move(exception), std::move(result));
        } catch (...) {
          boost::asio::post(work.executor(), [thrown = std::current_exception()] { std::rethrow_exception(thrown); });
        }
        return;
      }
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

  // Carrying out the core's decisions (impl/retry_steps.hpp).
  void launch();
  void on_cancel();
  void act(const decision& d);
  void wait_for_permit(duration wait);
  void permit_arrived();
  void on_permit_wait_over();
  void end_permit_wait(bool granted);
  void on_wake(unsigned generation);
  void sleep(const decision& d);
  void wake_early();
  void on_sleep(boost::system::error_code ec);
  void finish(stop_reason reason);
  void fail();
  void end();

  // Attempts and hedges, each on a lane (impl/retry_attempts.hpp).
  std::optional<latency_snapshot> observe(duration at) const;
  void record_latency(const attempt_record& record) const noexcept;
  void start_attempt(duration allowance, attempt_kind kind, std::uint64_t probe = 0);
  void consider_hedge();
  void report_hedge(hedge_result what, unsigned attempt, duration at);
  void arm_hedge_timer(duration at);
  void cancel_hedge_timer();
  void wind_down();
  unsigned repeat_bound(typename clock::time_point attempt_deadline) const;
  static void report_stuck(void* context);
  void on_attempt(std::size_t lane, attempt_completion<T>&& done);
  void take_winner(const attempt_record& record);
  attempt_end end_of(const attempt_record& record, std::uint64_t probe) const;
  void attempt_threw(const attempt_end& e, std::exception_ptr exception);
  void on_wound_down(attempt_record& record, const attempt_end& e, attempt_completion<T>&& done);

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
  [[no_unique_address]] Factory factory_;
  [[no_unique_address]] Classifier classify_;
  [[no_unique_address]] handler_allocator alloc_; ///< the allocator of its handlers
  outcome<T> result_;
  std::exception_ptr exception_;
  typename Timer::time_point start_{};
  duration next_wait_{};
  duration decided_at_{}; ///< when the core last decided, from the start
  attempt_lanes lanes_; ///< the attempts in flight (one without hedging)
  caller_link<retry_op> caller_; ///< the handler in the caller's cancellation slot
  std::atomic<unsigned> requested_{0}; ///< honoured cancellation types the caller asked for
  reference_count references_;
  unsigned wake_generation_ = 0; ///< of the latest placement of wake_
  std::uint32_t units_ = 0;      ///< the block's size, in units of its alignment
  part_offset hedge_at_ = 0;     ///< hedging's part, from the operation's start: with hedging only
  part_offset permit_at_ = 0;    ///< the concurrency limit's part: with a limit only
  repeat_safety safety_ = repeat_safety::unsafe;
  wait_source next_wait_source_ = wait_source::none;
  phase phase_ = phase::starting;
  bool finished_ = false;
  /// The caller emits from its handler's executor: when that is the
  /// strand, the slot may be cleared from the operation's steps. Set by
  /// make_operation_strand as strand_ is made (so no initializer here).
  bool clear_in_place_;
};

} // namespace coretry::detail

#endif
