#ifndef CORETRY_IMPL_ASYNC_RETRY_HPP
#define CORETRY_IMPL_ASYNC_RETRY_HPP

// The asynchronous layer: carries out the decision core's steps with a timer
// and cancellation slots. It decides nothing itself. The operation is in
// impl/retry_op.hpp, its steps in impl/retry_steps.hpp, its attempts and
// hedges in impl/retry_attempts.hpp.

#include <coretry/impl/retry_attempts.hpp>
#include <coretry/impl/retry_op.hpp>
#include <coretry/impl/retry_steps.hpp>

#include <type_traits>

namespace coretry::detail {

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
