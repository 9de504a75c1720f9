#include <coretry/classify.hpp>

#include <boost/asio/error.hpp>

namespace coretry {

verdict classify_error(const boost::system::error_code& ec) noexcept {
  namespace error = boost::asio::error;
  if (!ec) return verdict::success();
  if (ec == attempt_error::timed_out) return verdict::transient("timeout").overloaded();
  if (ec == error::connection_refused)
    return verdict::transient("connection_refused", delivery::never_sent).overloaded();
  if (ec == error::host_not_found || ec == error::host_not_found_try_again || ec == error::no_data)
    return verdict::transient("dns", delivery::never_sent);
  if (ec == error::network_unreachable || ec == error::host_unreachable || ec == error::network_down)
    return verdict::transient("unreachable", delivery::never_sent);
  if (ec == error::connection_reset || ec == error::connection_aborted || ec == error::broken_pipe)
    return verdict::transient("connection_reset");
  if (ec == error::eof) return verdict::transient("eof");
  if (ec == error::timed_out) return verdict::transient("timeout").overloaded();
  if (ec == error::try_again || ec == error::no_buffer_space) return verdict::transient("try_again");
  if (ec == error::operation_aborted) return verdict::permanent("aborted", delivery::unknown);
  return verdict::permanent("error", delivery::unknown);
}

verdict classify_outcome(stop_reason inner) noexcept {
  switch (inner) {
  case stop_reason::succeeded: return verdict::success();
  case stop_reason::attempts_exhausted: return verdict::transient("inner_attempts_exhausted");
  case stop_reason::deadline_exhausted: return verdict::transient("inner_deadline_exhausted");
  case stop_reason::server_delay_too_long: return verdict::transient("inner_server_delay_too_long");
  case stop_reason::budget_exhausted: return verdict::transient("inner_budget_exhausted");
  case stop_reason::outcome_unknown: return verdict::transient("inner_outcome_unknown");
  case stop_reason::dependency_unhealthy: return verdict::transient("inner_dependency_unhealthy");
  // The inner layer refused for want of a permit: a sign of overload to the
  // outer layer's own limit.
  case stop_reason::concurrency_limited: return verdict::transient("inner_concurrency_limited").overloaded();
  case stop_reason::rejected: return verdict::permanent("inner_rejected");
  case stop_reason::cancelled: return verdict::permanent("inner_cancelled", delivery::unknown);
  }
  return verdict::permanent("error", delivery::unknown);
}

} // namespace coretry
