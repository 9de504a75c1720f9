#ifndef CORETRY_SRC_HTTP_EXCHANGE_IO_HPP
#define CORETRY_SRC_HTTP_EXCHANGE_IO_HPP

// The exchange on an established connection: write the request, then read
// the response one bounded read at a time, looking for cancellation before
// each read, skipping interim responses up to their bound.
// Internal to coretry::http.

#include <coretry/http/client.hpp>

#include "connect.hpp"
#include "streamed_body.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>

namespace coretry::http::detail {

/// Writes `req` on `conn` and reads its final response into `x.res`, within
/// the limits of `options` (header, body, line, interim responses, idle
/// time between reads). Every failure is recorded in `x.error`, with
/// `x.reached` saying how far it got. `keep_alive` tells whether the
/// connection may carry another request; `answered` whether any byte of a
/// response arrived.
boost::asio::awaitable<void> write_and_read(const client_options& options, connection& conn, const request& req,
                                            const body_streaming& streaming, exchange& x, bool& keep_alive,
                                            bool& answered);

/// The errors of a connection the server had closed before the request.
bool closed_by_peer(const boost::system::error_code& ec);

} // namespace coretry::http::detail

#endif
