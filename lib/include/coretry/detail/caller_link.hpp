#ifndef CORETRY_DETAIL_CALLER_LINK_HPP
#define CORETRY_DETAIL_CALLER_LINK_HPP

// The handler an operation installs in its caller's cancellation slot.
//
// The caller emits from its handler's executor; the operation's steps may run
// on another one (a strand of the I/O context, when the handler is bound to a
// second io_context). Asio's slots are not thread-safe: installing, clearing
// and emitting must not overlap. So the operation installs its handler once,
// from the initiating call, and never clears the slot from its own executor
// unless that is also the caller's. It detaches instead: the handler in the
// slot holds the operation through a small lock, and once detached an
// emission does nothing. A detached handler left in the slot is harmless; the
// caller's next operation replaces it.
//
// The owner provides two functions. `accept_caller_cancellation(type)` is
// called under the lock (so the owner cannot be freed meanwhile): it records
// the request and answers whether to act on it, having then taken a
// reference to itself (only while it is still alive: an owner may be
// detaching from its destructor). `act_on_caller_cancellation()` is then
// called without the lock, holding that reference: it posts the step that
// acts on the request. Posting under the lock could deadlock: a post to a
// strand whose service has shut down destroys the step at once, which may
// free the owner, which detaches, which takes the lock.

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>

#include <atomic>
#include <thread>
#include <utility>

namespace coretry::detail {

template <class Owner>
class caller_link_handler {
public:
  explicit caller_link_handler(Owner* owner) noexcept : owner_(owner) {}
  caller_link_handler(const caller_link_handler&) = delete;
  caller_link_handler& operator=(const caller_link_handler&) = delete;

  void operator()(boost::asio::cancellation_type type) {
    Owner* accepted = nullptr;
    {
      const guard held(busy_);
      if (owner_ && owner_->accept_caller_cancellation(type)) accepted = owner_;
    }
    if (accepted) accepted->act_on_caller_cancellation();
  }

  /// No emission reaches the owner once this has returned; one under way
  /// has finished with it, or holds a reference of its own.
  void detach() noexcept {
    const guard held(busy_);
    owner_ = nullptr;
  }

private:
  // Held for a few instructions (a pointer and a counter): a spin lock costs
  // less than a mutex on the path every operation takes.
  class guard {
  public:
    explicit guard(std::atomic<bool>& busy) noexcept : busy_(busy) {
      while (busy_.exchange(true, std::memory_order_acquire))
        while (busy_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
    ~guard() { busy_.store(false, std::memory_order_release); }
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;

  private:
    std::atomic<bool>& busy_;
  };

  std::atomic<bool> busy_{false};
  Owner* owner_;
};

/// The operation's side: the slot and the handler it installed there.
template <class Owner>
class caller_link {
public:
  /// Installs the handler in `slot` when the caller connected one. Called
  /// once, from the initiating call (where the caller is not emitting).
  void attach(boost::asio::cancellation_slot slot, Owner* owner) {
    if (!slot.is_connected()) return;
    slot_ = slot;
    handler_ = &slot.template emplace<caller_link_handler<Owner>>(owner);
  }

  /// From any thread: no emission reaches the owner after this.
  void detach() noexcept {
    if (handler_) std::exchange(handler_, nullptr)->detach();
  }

  /// Detaches, then takes the handler out of the slot. Only from the
  /// executor the caller emits from.
  void detach_and_clear() {
    if (!handler_) return;
    detach();
    slot_.clear();
  }

private:
  boost::asio::cancellation_slot slot_;
  caller_link_handler<Owner>* handler_ = nullptr;
};

} // namespace coretry::detail

#endif
