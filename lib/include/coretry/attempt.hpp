#ifndef CORETRY_ATTEMPT_HPP
#define CORETRY_ATTEMPT_HPP

#include <coretry/policy.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/system/error_code.hpp>

#include <exception>
#include <type_traits>
#include <variant>

namespace coretry {

/// What the attempt factory is told about the attempt it must create.
template <class Clock>
struct attempt_context {
  unsigned number;                      ///< 1 for the initial attempt
  typename Clock::time_point deadline;  ///< when this attempt will be cancelled
  duration allowance;                   ///< deadline - now
  duration remaining;                   ///< what remains of the overall deadline (duration::max() if none)
};

/// Tells coretry the completion signature of an attempt operation type.
/// Specialised for Asio's deferred operations and for awaitables; specialise
/// it for other lazy operation types. An attempt's signature is one of
/// void(error_code), void(error_code, T), void(std::exception_ptr) or
/// void(std::exception_ptr, T).
template <class Op>
struct attempt_op_traits;

/// Any asynchronous operation object whose completion signature Asio can
/// tell: deferred operations (`x.async_y(..., asio::deferred)`) and deferred
/// sequences (`op(asio::deferred) | asio::deferred(...)`).
template <class Op>
  requires boost::asio::is_async_operation<Op>::value
struct attempt_op_traits<Op> {
  using signature = typename boost::asio::completion_signature_of<Op>::type;
};

template <class T, class Executor>
struct attempt_op_traits<boost::asio::awaitable<T, Executor>> {
  using signature = std::conditional_t<std::is_void_v<T>, void(std::exception_ptr), void(std::exception_ptr, T)>;
};

namespace detail {

template <class Signature>
struct completion_traits;

template <class First>
concept attempt_error_arg =
    std::is_same_v<First, boost::system::error_code> || std::is_same_v<First, std::exception_ptr>;

template <class First>
  requires attempt_error_arg<First>
struct completion_traits<void(First)> {
  using value_type = std::monostate;
};

template <class First, class T>
  requires attempt_error_arg<First>
struct completion_traits<void(First, T)> {
  using value_type = std::decay_t<T>;
};

template <class Op>
using attempt_value_t =
    typename completion_traits<typename attempt_op_traits<std::decay_t<Op>>::signature>::value_type;

} // namespace detail
} // namespace coretry

#endif
