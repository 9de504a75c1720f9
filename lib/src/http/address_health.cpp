#include "address_health.hpp"
#include "exchange_machine.hpp"

#include <coretry/stop_reason.hpp>

#include <boost/asio/error.hpp>

namespace coretry::http::detail {

namespace asio = boost::asio;
using boost::system::error_code;

bool address_failed(const error_code& ec) noexcept {
  return ec == asio::error::connection_refused || ec == asio::error::connection_reset ||
         ec == asio::error::connection_aborted || ec == asio::error::host_unreachable ||
         ec == asio::error::network_unreachable || ec == asio::error::timed_out;
}

blame connect_blame(const connect_report& r, duration attempt_delay) noexcept {
  if (address_failed(r.error)) return blame::failure;
  if (r.outrun && r.tried > r.winner_tried && r.tried >= r.winner_tried + attempt_delay) return blame::failure;
  return blame::none;
}

blame attempt_blame(const error_code& ec, const exchange& x, attempt_status status, bool through_proxy) noexcept {
  if (through_proxy || !x.address) return blame::none;
  const bool timed_out = ec == attempt_error::timed_out;
  const bool server_error = x.res && x.res->result_int() >= 500 && status == attempt_status::transient;
  const bool broke = !ec && !x.res && !x.reused_connection &&
                     (closed_by_peer(x.error) || x.error == asio::error::timed_out);
  if (timed_out || server_error || broke) return blame::failure;
  if (x.res && x.res->result_int() < 500) return blame::success;
  return blame::none;
}

void address_health::connect_ended(name_and_port n, const connect_report& r, time_point now) {
  // An address not in the book (an IP-address host, one a lookup dropped
  // since) is not recorded: the book ignores it.
  if (connect_blame(r, attempt_delay_) == blame::failure) book_.failed(n, r.at, now, r.tried);
}

std::optional<duration> unanswered_time(const exchange& x) noexcept {
  if (x.res) return std::nullopt;
  duration waited{};
  for (const phase p : {phase::write, phase::first_byte, phase::read}) waited += x.phases[p].value_or(duration{});
  return waited;
}

} // namespace coretry::http::detail
