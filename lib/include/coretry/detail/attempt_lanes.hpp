#ifndef CORETRY_DETAIL_ATTEMPT_LANES_HPP
#define CORETRY_DETAIL_ATTEMPT_LANES_HPP

// The attempts of one operation that may run at the same time (hedging): a
// fixed set of lanes, each with the cancellation signal of the attempt it
// carries, the index of that attempt's record and the gate's probe ticket to
// give back when it ends. Without hedging only lane 0 is ever used. Lanes are
// touched only from the operation's strand.

#include <coretry/detail/counted_ref.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace coretry::detail {

/// One attempt in flight.
struct attempt_lane {
  boost::asio::cancellation_signal signal; ///< its operations' cancellation
  std::size_t record = 0;                  ///< index of its attempt_record
  std::uint64_t probe = 0;                 ///< the gate's probe ticket, given back when it ends
  bool busy = false;
};

/// The lanes of an operation: at most N attempts in flight.
template <std::size_t N>
class attempt_lanes {
public:
  /// Takes a free lane for the attempt whose record is `record`; there is
  /// always one (the decision core never allows more than N in flight).
  std::size_t acquire(std::size_t record, std::uint64_t probe = 0) noexcept {
    std::size_t i = 0;
    while (i + 1 < N && lanes_[i].busy) ++i;
    lanes_[i].busy = true;
    lanes_[i].record = record;
    lanes_[i].probe = probe;
    ++in_flight_;
    return i;
  }
  /// Frees lane `i` once its attempt has finished.
  void release(std::size_t i) noexcept {
    lanes_[i].busy = false;
    --in_flight_;
  }
  attempt_lane& operator[](std::size_t i) noexcept { return lanes_[i]; }
  static constexpr std::size_t size() noexcept { return N; }
  unsigned in_flight() const noexcept { return in_flight_; }
  /// Sends terminal cancellation to every attempt in flight. An attempt
  /// runner never completes inside the emission.
  void cancel_all() {
    for (attempt_lane& lane : lanes_)
      if (lane.busy) lane.signal.emit(boost::asio::cancellation_type::terminal);
  }

private:
  std::array<attempt_lane, N> lanes_{};
  unsigned in_flight_ = 0;
};

/// The completion handler of the attempt on one lane: a counted reference to
/// its owner, whose serial executor and allocator it takes, with the lane's
/// cancellation slot; it hands what it receives to
/// `owner.on_lane_completion(lane, ...)`. The owner provides `executor()`,
/// `lane_slot(lane)` and `allocator()`.
template <class Owner>
struct lane_handler {
  using executor_type = boost::asio::any_io_executor;
  using cancellation_slot_type = boost::asio::cancellation_slot;
  using allocator_type = typename Owner::allocator_type;

  executor_type get_executor() const noexcept { return owner->executor(); }
  cancellation_slot_type get_cancellation_slot() const noexcept { return owner->lane_slot(lane); }
  allocator_type get_allocator() const noexcept { return owner->allocator(); }

  template <class... Args>
  void operator()(Args&&... args) {
    counted_ref<Owner> self(std::move(owner));
    self->on_lane_completion(lane, std::forward<Args>(args)...);
    self.done();
  }

  counted_ref<Owner> owner;
  std::size_t lane;
};

} // namespace coretry::detail

#endif
