// The rules of a redirect (redirect.hpp), and redirect_error's category.
#include "redirect.hpp"

#include "prepare.hpp"

#include <coretry/http/redact.hpp>
#include <coretry/http/url.hpp>

#include <boost/url/parse.hpp>
#include <boost/url/url.hpp>

#include <iterator>
#include <string>

namespace coretry::http {

namespace {

class redirect_category_impl final : public boost::system::error_category {
public:
  const char* name() const noexcept override { return "coretry.http.redirect"; }
  std::string message(int value) const override {
    switch (static_cast<redirect_error>(value)) {
    case redirect_error::too_many_redirects: return "too many redirects";
    case redirect_error::bad_location: return "the redirect's Location is not a URL the client would request";
    case redirect_error::insecure_redirect: return "a redirect from https:// to http:// was refused";
    }
    return "unknown redirect error";
  }
};

} // namespace

const boost::system::error_category& redirect_error_category() noexcept {
  static const redirect_category_impl category;
  return category;
}

boost::system::error_code make_error_code(redirect_error e) noexcept {
  return {static_cast<int>(e), redirect_error_category()};
}

namespace detail {

namespace beast_http = boost::beast::http;

std::string_view redirect_category(redirect_error e) noexcept {
  switch (e) {
  case redirect_error::too_many_redirects: return "too_many_redirects";
  case redirect_error::bad_location: return "bad_redirect_location";
  case redirect_error::insecure_redirect: return "insecure_redirect";
  }
  return "redirect";
}

namespace {

/// The longest part of a Location or URL quoted in a problem.
constexpr std::size_t most_quoted = 512;

std::string quoted(std::string_view url) { return "'" + printable(redact_url(url), most_quoted) + "'"; }

redirect_step refused(redirect_error error, std::string problem) {
  redirect_step step;
  step.action = redirect_step::kind::refuse;
  step.error = error;
  step.problem = std::move(problem);
  return step;
}

} // namespace

redirect_step next_redirect(std::string_view url, beast_http::verb method, const beast_http::response_header<>& answer,
                            unsigned hops, const redirect_options& options) {
  const unsigned status = answer.result_int();
  if (!is_followed_status(status)) return {};
  const auto [first, last] = answer.equal_range(beast_http::field::location);
  if (first == last) return {};
  const std::string status_text = std::to_string(status);
  const std::string answered = "the " + status_text + " from " + quoted(url);
  if (std::next(first) != last)
    return refused(redirect_error::bad_location, answered + " has more than one Location field");
  const std::string_view location = first->value();
  // An empty Location is no Location: the answer is the final one.
  if (location.empty()) return {};
  if (location.size() > redirect_options::max_location_length)
    return refused(redirect_error::bad_location, answered + " has a Location of " + std::to_string(location.size()) +
                                                     " bytes, longer than " +
                                                     std::to_string(redirect_options::max_location_length));

  // Bytes above 0x7f (raw UTF-8, which some servers send) are
  // percent-encoded, as browsers and curl do; a space or control character
  // is not guessed at.
  std::string encoded;
  encoded.reserve(location.size());
  for (const char c : location) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte == 0x7f)
      return refused(redirect_error::bad_location,
                     answered + " has a Location with a space or control character: " + quoted(location));
    if (byte < 0x80) {
      encoded += c;
      continue;
    }
    static constexpr char digits[] = "0123456789ABCDEF";
    encoded += '%';
    encoded += digits[byte >> 4];
    encoded += digits[byte & 0xf];
  }

  const auto reference = boost::urls::parse_uri_reference(encoded);
  if (!reference)
    return refused(redirect_error::bad_location, answered + " has a Location that is not a URL: " + quoted(location));
  const auto base = boost::urls::parse_uri(url);
  if (!base) return refused(redirect_error::bad_location, answered + ": its URL cannot be a base for the Location");
  boost::urls::url next;
  if (auto resolved = boost::urls::resolve(*base, *reference, next); !resolved)
    return refused(redirect_error::bad_location,
                   answered + " has a Location that does not resolve against it: " + quoted(location));
  // RFC 9110 §10.2.2: a Location without a fragment takes the request's.
  if (!reference->has_fragment() && base->has_fragment()) next.set_encoded_fragment(base->encoded_fragment());
  // The URL's credentials are not the Location's: the chain gives them to
  // the origins they are for.
  redirect_step step;
  step.own_userinfo = reference->has_authority() && reference->has_userinfo();
  if (!step.own_userinfo) next.remove_userinfo();
  step.target = std::string(next.buffer());

  // The target is held to every rule of a request's URL.
  if (auto problem = url_problem(step.target))
    return refused(redirect_error::bad_location,
                   answered + " has a Location " + quoted(location) + " the client would not request: " + *problem);
  if (base->scheme_id() == boost::urls::scheme::https && next.scheme_id() == boost::urls::scheme::http &&
      !options.allow_insecure)
    return refused(redirect_error::insecure_redirect,
                   answered + " to " + quoted(step.target) + " was not followed: https:// is not redirected to http://");
  if (hops >= options.max_redirects)
    return refused(redirect_error::too_many_redirects,
                   "too many redirects: " + std::to_string(hops) + " followed, at most " +
                       std::to_string(options.max_redirects) + "; the last, " + answered + ", to " +
                       quoted(step.target));

  step.action = redirect_step::kind::follow;
  step.to_get = (status == 303 && method != beast_http::verb::head) ||
                ((status == 301 || status == 302) && method == beast_http::verb::post);
  return step;
}

} // namespace detail
} // namespace coretry::http
