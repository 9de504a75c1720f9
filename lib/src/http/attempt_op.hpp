#ifndef CORETRY_SRC_HTTP_ATTEMPT_OP_HPP
#define CORETRY_SRC_HTTP_ATTEMPT_OP_HPP

// One attempt of a request as a composed operation (client::start_attempt,
// defined in attempt_op.cpp). Internal to coretry::http.

#include <boost/system/error_code.hpp>

namespace coretry::http::detail {

/// The errors of a connection the server had closed before the request.
bool closed_by_peer(const boost::system::error_code& ec);

} // namespace coretry::http::detail

#endif
