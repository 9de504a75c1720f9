#include <coretry/detail/single_threaded.hpp>

#include <boost/asio/detail/concurrency_hint.hpp>
#include <boost/asio/detail/scheduler.hpp>

namespace coretry::detail {

bool is_single_threaded(boost::asio::io_context& context) {
  const int hint = boost::asio::use_service<boost::asio::detail::scheduler>(context).concurrency_hint();
  return hint == 1 || !BOOST_ASIO_CONCURRENCY_HINT_IS_LOCKING(SCHEDULER, hint);
}

} // namespace coretry::detail
