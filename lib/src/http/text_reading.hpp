#ifndef CORETRY_SRC_HTTP_TEXT_READING_HPP
#define CORETRY_SRC_HTTP_TEXT_READING_HPP

// The parse-or-describe pair of a text the client reads (a URL, a proxy
// URL), from the one function that reads it into its parts or says why not:
// parse_... throws std::invalid_argument with the reason, ..._problem returns
// it. Internal to coretry::http.

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace coretry::http::detail {

/// Reads `text` into `parts`; the reason it is refused, or nullopt.
template <class Parts>
using text_reader = std::optional<std::string> (*)(std::string_view text, Parts& parts);

/// What `read` makes of `text`; throws std::invalid_argument with the reason
/// after "coretry::http: ".
template <class Parts>
Parts read_or_throw(std::string_view text, text_reader<Parts> read) {
  Parts parts;
  if (auto problem = read(text, parts)) throw std::invalid_argument("coretry::http: " + *problem);
  return parts;
}

/// Why `read` refuses `text`, or nullopt when it takes it.
template <class Parts>
std::optional<std::string> reading_problem(std::string_view text, text_reader<Parts> read) {
  Parts parts;
  return read(text, parts);
}

} // namespace coretry::http::detail

#endif
