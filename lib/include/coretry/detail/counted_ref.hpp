#ifndef CORETRY_DETAIL_COUNTED_REF_HPP
#define CORETRY_DETAIL_COUNTED_REF_HPP

// Ownership of an operation by the handlers it has outstanding.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <atomic>
#include <cstddef>
#include <utility>

namespace coretry::detail {

/// The count of an owner's references, taken and given back from any
/// thread: `add_ref()`, `try_add_ref()` and the test in `release()` of an
/// owner of counted_ref.
class reference_count {
public:
  void add() noexcept { n_.fetch_add(1, std::memory_order_relaxed); }
  /// A reference more, unless the owner is already being freed (none left).
  bool try_add() noexcept {
    int n = n_.load(std::memory_order_relaxed);
    while (n > 0)
      if (n_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) return true;
    return false;
  }
  /// One fewer: true when it was the last.
  bool drop() noexcept { return n_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

private:
  std::atomic<int> n_{0};
};

/// A counted reference to an object with `add_ref()` and
/// `release(bool ran, How...)`: move-only, released on destruction, so that a
/// handler destroyed without being run (a destroyed io_context) still gives
/// its reference back.
template <class Owner>
class counted_ref {
public:
  explicit counted_ref(Owner* owner) noexcept : owner_(owner) { owner_->add_ref(); }
  /// Takes over a reference that `owner` already counts (one a queued
  /// deadline held).
  static counted_ref adopt(Owner* owner) noexcept { return counted_ref(owner, adopting{}); }
  counted_ref(counted_ref&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)) {}
  counted_ref& operator=(counted_ref&&) = delete;
  counted_ref(const counted_ref&) = delete;
  /// A handler that has run gives its reference back this way: the owner
  /// may then complete, and call its caller's handler, which may throw (the
  /// exception goes on to whoever ran this handler, as with any Asio
  /// handler; the owner is already gone by then). One destroyed unrun (a
  /// destroyed io_context) gives it back through the destructor: the owner
  /// is then freed without completing.
  template <class... How>
  void done(How... how) {
    if (owner_) std::exchange(owner_, nullptr)->release(true, how...);
  }
  ~counted_ref() {
    if (owner_) owner_->release(false);
  }
  Owner* operator->() const noexcept { return owner_; }
  Owner& operator*() const noexcept { return *owner_; }

private:
  struct adopting {};
  counted_ref(Owner* owner, adopting) noexcept : owner_(owner) {}
  Owner* owner_;
};

/// The completion handler an operation gives to an operation it runs inside
/// it: it holds a counted reference to its owner, takes the owner's serial
/// executor, the cancellation slot of its `lane` and the owner's allocator as
/// its own, and hands what it receives to `owner.on_completion(lane, ...)`.
/// An owner running one inner operation at a time uses lane 0; one running
/// several (a retrying operation's hedges) gives each its own lane. The
/// owner provides `executor()`, `inner_slot(lane)` and `allocator()`.
template <class Owner>
struct owned_handler {
  using executor_type = boost::asio::any_io_executor;
  using cancellation_slot_type = boost::asio::cancellation_slot;
  using allocator_type = typename Owner::allocator_type;

  executor_type get_executor() const noexcept { return owner->executor(); }
  /// The owner's executor itself, not a copy (what get_executor() copies).
  const executor_type& owners_executor() const noexcept { return owner->executor(); }
  cancellation_slot_type get_cancellation_slot() const noexcept { return owner->inner_slot(lane); }
  allocator_type get_allocator() const noexcept { return owner->allocator(); }

  template <class... Args>
  void operator()(Args&&... args) {
    counted_ref<Owner> self(std::move(owner));
    self->on_completion(lane, std::forward<Args>(args)...);
    self.done();
  }

  counted_ref<Owner> owner;
  std::size_t lane = 0;
};

} // namespace coretry::detail

#endif
