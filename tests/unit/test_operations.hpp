#ifndef CORETRY_TESTS_UNIT_TEST_OPERATIONS_HPP
#define CORETRY_TESTS_UNIT_TEST_OPERATIONS_HPP

// Attempt operations and an allocator for the engine's tests: one that says
// nothing until cancelled, one that completes at once, one started by a
// given initiation, and an allocator that counts.

#include "test_support.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstddef>
#include <memory>

namespace coretry_tests {

/// An operation that says nothing for a day unless it is cancelled: a wait
/// on a timer of type Timer, held by the io_context like any pending I/O,
/// which completes with operation_aborted when cancelled.
template <class Value, class Timer = asio::steady_timer>
auto silent_operation(asio::io_context& io) {
  return [&io](auto handler) {
    auto timer = std::make_shared<Timer>(io);
    timer->expires_after(std::chrono::hours(24));
    auto slot = asio::get_associated_cancellation_slot(handler);
    auto ex = asio::get_associated_executor(handler);
    timer->async_wait(asio::bind_cancellation_slot(
        slot, asio::bind_executor(ex, [timer, h = std::move(handler)](boost::system::error_code ec) mutable {
          std::move(h)(ec ? ec : asio::error::timed_out, Value{});
        })));
  };
}

/// An operation that completes at once (through the executor) with 7.
inline auto immediate_operation() {
  return [](auto handler) {
    auto ex = asio::get_associated_executor(handler);
    asio::post(ex, [h = std::move(handler)]() mutable { std::move(h)(boost::system::error_code{}, 7); });
  };
}

/// An attempt operation started by `initiation(handler)`, completing with
/// (error_code, int): for operations that complete or fail at once.
template <class Initiation>
auto deferred_attempt(Initiation initiation) {
  return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code, int)>(std::move(initiation),
                                                                                          asio::deferred);
}

/// An allocator that counts what it hands out and takes back.
template <class T>
struct counting_allocator {
  using value_type = T;
  counting_allocator(int* allocations, int* deallocations) noexcept : allocs(allocations), deallocs(deallocations) {}
  template <class U>
  counting_allocator(const counting_allocator<U>& other) noexcept : allocs(other.allocs), deallocs(other.deallocs) {}
  T* allocate(std::size_t n) {
    ++*allocs;
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) {
    ++*deallocs;
    std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const counting_allocator<U>& other) const noexcept {
    return allocs == other.allocs;
  }
  int* allocs;
  int* deallocs;
};

} // namespace coretry_tests

#endif
