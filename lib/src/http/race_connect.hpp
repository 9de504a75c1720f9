#ifndef CORETRY_SRC_HTTP_RACE_CONNECT_HPP
#define CORETRY_SRC_HTTP_RACE_CONNECT_HPP

// A new connection to one of several addresses, raced as Happy Eyeballs v2
// does (RFC 8305 §5). Internal to coretry::http.

#include <coretry/policy.hpp>

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
/// one fails; the first connection made wins and every other is cancelled
/// and closed. `failed` is told each address that refused or failed, and
/// each still trying when another won after it had tried for at least
/// `attempt_delay`. Runs on the coroutine's executor (which must be
/// serial: the retry engine's attempts run on a strand); its cancellation
/// (any type) ends the race at once with operation_aborted, every socket
/// closed. `endpoints` must not be empty.
boost::asio::awaitable<race_result> race_connect(const std::vector<boost::asio::ip::tcp::endpoint>& endpoints,
                                                 duration attempt_delay,
                                                 const std::function<void(const boost::asio::ip::tcp::endpoint&)>& failed);

} // namespace coretry::http::detail

#endif
