#ifndef CORETRY_SRC_HTTP_REDIRECT_HPP
#define CORETRY_SRC_HTTP_REDIRECT_HPP

// The rules of following a redirect, without I/O: from the URL and method of
// a request and the head of its answer to the next request's URL and method,
// or to the reason it is not followed (coretry/http/redirect.hpp). The client
// drives a chain of them (redirect.cpp). Internal to coretry::http.

#include <coretry/http/redirect.hpp>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/verb.hpp>

#include <string>
#include <string_view>

namespace coretry::http::detail {

/// 301, 302, 303, 307 or 308: the statuses followed.
constexpr bool is_followed_status(unsigned status) noexcept {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

/// What to do with an answer.
struct redirect_step {
  enum class kind {
    final_answer, ///< not a redirect that is followed: the answer is the request's
    follow,       ///< request `target` next
    refuse,       ///< a redirect not followed: the request ends as rejected, `error`
  };
  kind action = kind::final_answer;
  redirect_error error{};
  /// When refused: a sentence naming the Location or the target.
  std::string problem;
  /// The next URL, absolute, with its fragment; userinfo only when the
  /// Location itself has one (`own_userinfo`).
  std::string target;
  bool own_userinfo = false;
  /// The next request is a GET without a body.
  bool to_get = false;
};

/// The step after `answer` to a `method` request for `url`, when `hops`
/// redirects were followed before it.
redirect_step next_redirect(std::string_view url, boost::beast::http::verb method,
                            const boost::beast::http::response_header<>& answer, unsigned hops,
                            const redirect_options& options);

/// The verdict category of an attempt whose redirect is not followed.
std::string_view redirect_category(redirect_error e) noexcept;

} // namespace coretry::http::detail

#endif
