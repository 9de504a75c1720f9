#ifndef CORETRY_SRC_HTTP_RACE_CONNECT_HPP
#define CORETRY_SRC_HTTP_RACE_CONNECT_HPP

// A new connection to one of several addresses, raced as Happy Eyeballs v2
// does (RFC 8305 §5). Internal to coretry::http.

#include <coretry/policy.hpp>

#include "address_health.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include <functional>
#include <optional>
#include <vector>

namespace coretry::http::detail {

struct race_result {
  boost::system::error_code error; ///< the last address's failure when none connected
  std::optional<boost::asio::ip::tcp::socket> socket;
  boost::asio::ip::tcp::endpoint winner;
};

/// Connects to the first address; each further address is tried when
/// `attempt_delay` has passed since the one before started, or at once when
/// one fails (for each one that fails); the first connection made wins and
/// every other is cancelled and closed. `report` is told what became of
/// each address that did not win (address_health.hpp judges it): its own
/// failure, or that it was still trying when another won, and for how long
/// each had been trying. Runs on the coroutine's
/// executor (which must be serial: the retry engine's attempts run on a
/// strand); the coroutine's cancellation ends the race at once with
/// operation_aborted, every socket closed. `endpoints` must not be empty.
boost::asio::awaitable<race_result> race_connect(const std::vector<boost::asio::ip::tcp::endpoint>& endpoints,
                                                 duration attempt_delay,
                                                 const std::function<void(const connect_report&)>& report);

} // namespace coretry::http::detail

#endif
