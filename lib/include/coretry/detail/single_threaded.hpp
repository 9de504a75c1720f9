#ifndef CORETRY_DETAIL_SINGLE_THREADED_HPP
#define CORETRY_DETAIL_SINGLE_THREADED_HPP

#include <boost/asio/io_context.hpp>

namespace coretry::detail {

/// True when the io_context was made for one thread (concurrency hint 1, or
/// a hint that turns the scheduler's locking off): the owner promised Asio
/// that a single thread runs it, so its handlers already run one at a time.
/// Compiled in the library: reading the hint needs Asio's internals, which
/// stay out of the public headers.
bool is_single_threaded(boost::asio::io_context& context);

} // namespace coretry::detail

#endif
