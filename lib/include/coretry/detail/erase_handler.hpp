#ifndef CORETRY_DETAIL_ERASE_HANDLER_HPP
#define CORETRY_DETAIL_ERASE_HANDLER_HPP

// A handler stored as boost::asio::any_completion_handler, safely.
//
// Boost 1.81's any_completion_handler, destroyed without being called,
// frees its block with the allocator it took from the handler it holds: it
// takes that allocator, destroys the handler, then frees. When the handler's
// allocator is itself an any_completion_handler's (a composed operation whose
// own handler is type-erased, such as the HTTP client's attempt), it points
// into a block that the handler just destroyed owned: a use after free. This
// happens to a handler queued when its io_context is destroyed. Such a
// handler is erased with a plain allocator instead, which refers to nothing.

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/recycling_allocator.hpp>

#include <type_traits>
#include <utility>

namespace coretry::detail {

template <class Allocator>
struct is_erased_handler_allocator : std::false_type {};
template <class T, class... Signatures>
struct is_erased_handler_allocator<boost::asio::any_completion_handler_allocator<T, Signatures...>>
    : std::true_type {};

/// `handler` as an any_completion_handler<Signature>; its associated
/// executor and cancellation slot are kept.
template <class Signature, class Handler>
boost::asio::any_completion_handler<Signature> erase_handler(Handler&& handler) {
  using allocator = boost::asio::associated_allocator_t<std::decay_t<Handler>>;
  if constexpr (is_erased_handler_allocator<allocator>::value)
    return boost::asio::any_completion_handler<Signature>(
        boost::asio::bind_allocator(boost::asio::recycling_allocator<void>(), std::forward<Handler>(handler)));
  else
    return boost::asio::any_completion_handler<Signature>(std::forward<Handler>(handler));
}

} // namespace coretry::detail

#endif
