#ifndef CORETRY_HTTP_CLIENT_ERROR_HPP
#define CORETRY_HTTP_CLIENT_ERROR_HPP
/// @file
/// The client's own refusals of a response (response_error) and their error
/// category.

#include <boost/system/error_category.hpp>
#include <boost/system/error_code.hpp>

#include <type_traits>

namespace coretry::http {

/// What the client refuses in a response beyond Beast's own errors
/// (header_limit, body_limit). Each one is permanent: the server would send
/// the same again.
enum class response_error {
  line_too_long = 1,          ///< a chunk-size line, chunk extension or trailer section over line_limit
  too_many_interim_responses, ///< more 1xx responses than max_interim_responses
};

const boost::system::error_category& response_error_category() noexcept;
boost::system::error_code make_error_code(response_error e) noexcept;

} // namespace coretry::http

template <>
struct boost::system::is_error_code_enum<coretry::http::response_error> : std::true_type {};

#endif
