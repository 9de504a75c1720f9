#ifndef CORETRY_DETAIL_ATTEMPT_LANES_HPP
#define CORETRY_DETAIL_ATTEMPT_LANES_HPP

// The attempts of one operation that may run at the same time: lanes, each
// with the cancellation signal of the attempt it carries, the index of that
// attempt's record and the gate's probe ticket to give back when it ends.
// Lane 0 is always there; the lanes a hedge may take (at most
// policy::max_hedges_cap) exist only for an operation whose policy sends
// hedges, in memory its owner provides (after the operation, in its block).
// Lanes are touched only from the operation's strand.

#include <coretry/policy.hpp>

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>

#include <array>
#include <cstddef>
#include <cstdint>

namespace coretry::detail {

/// One attempt in flight.
struct attempt_lane {
  boost::asio::cancellation_signal signal; ///< its operations' cancellation
  std::uint64_t probe = 0;                 ///< the gate's probe ticket, given back when it ends
  unsigned record = 0;                     ///< index of its attempt_record
  bool busy = false;
};

/// The lanes of an operation: lane 0, and the hedges' lanes when attached.
class attempt_lanes {
public:
  /// The lanes only hedges use.
  using hedge_lanes = std::array<attempt_lane, policy::max_hedges_cap>;

  /// Gives the operation its hedges' lanes (before any attempt starts).
  void attach(hedge_lanes* more) noexcept { more_ = more; }
  /// Takes a free lane for the attempt whose record is `record`; there is
  /// always one (the decision core never allows more in flight than there
  /// are lanes).
  std::size_t acquire(std::size_t record, std::uint64_t probe = 0) noexcept {
    std::size_t i = 0;
    while (i + 1 < size() && (*this)[i].busy) ++i;
    attempt_lane& lane = (*this)[i];
    lane.busy = true;
    lane.record = static_cast<unsigned>(record);
    lane.probe = probe;
    ++in_flight_;
    return i;
  }
  /// Frees lane `i` once its attempt has finished.
  void release(std::size_t i) noexcept {
    (*this)[i].busy = false;
    --in_flight_;
  }
  attempt_lane& operator[](std::size_t i) noexcept { return i == 0 ? first_ : (*more_)[i - 1]; }
  std::size_t size() const noexcept { return more_ ? more_->size() + 1 : 1; }
  unsigned in_flight() const noexcept { return in_flight_; }
  /// Sends terminal cancellation to every attempt in flight. An attempt
  /// runner never completes inside the emission.
  void cancel_all() {
    for (std::size_t i = 0; i < size(); ++i)
      if ((*this)[i].busy) (*this)[i].signal.emit(boost::asio::cancellation_type::terminal);
  }

private:
  attempt_lane first_;
  hedge_lanes* more_ = nullptr;
  unsigned in_flight_ = 0;
};

} // namespace coretry::detail

#endif
