#ifndef CORETRY_FAULTS_FAULT_SCRIPT_HPP
#define CORETRY_FAULTS_FAULT_SCRIPT_HPP

#include <chrono>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

// The language in which a request tells the fault server how to answer it.
//
//   /status/{code}?{option}&{option}...      one response
//   /seq/{name}?steps={step},{step},...      the k-th request to {name} gets
//                                            the k-th step; the last repeats
//   step   = [code] *(";" option)            code defaults to 200
//   code   = 3DIGIT, 100-599
//   option = retry-after=VALUE               Retry-After: VALUE, verbatim
//          | retry-after-date=[+|-]SECONDS   Retry-After: IMF-fixdate that far from now
//          | header=NAME:VALUE               an extra header field (repeatable)
//          | body=TEXT                       the body instead of {"status":CODE}
//          | delay=MS                        wait before sending the headers
//          | percent=P                       (/status only) follow this script for P% of
//                                            requests, drawn at random; the rest get a plain 200
//          | drip=N:MS                       N body bytes, each after a MS pause
//          | hang-after-headers              headers, then silence until closed
//          | close                           close without responding
//          | reset                           abort with a TCP RST, no response
//
// Names and values are percent-decoded ('+' is a plus sign, not a space).
// Inside `steps` the separators `,` `;` must be literal, so percent-encode
// them (%2C, %3B) to put them in a value.
namespace coretry::faults {

/// How a response ends the exchange; at most one of the non-default fates
/// per response.
enum class response_fate {
  complete,           ///< Headers and the whole body.
  drip,               ///< Headers, then the body one byte at a time.
  hang_after_headers, ///< Headers announcing a body that never comes.
  close,              ///< No response: the connection is closed.
  reset,              ///< No response: the connection is aborted with a TCP RST.
};

struct header_field {
  std::string name;
  std::string value;
};

struct response_plan {
  unsigned status = 200;
  /// Extra fields in the order given. A name given here replaces the
  /// server's own field of that name (Date, Content-Type, ...).
  std::vector<header_field> headers;
  /// The body=TEXT option; the default body is `{"status":CODE}`.
  std::optional<std::string> body;
  std::chrono::milliseconds delay{0};
  /// The percent=P option: the share of requests (0-100) that get this plan;
  /// the others get a plain 200. Only /status scripts honour it.
  unsigned percent = 100;
  response_fate fate = response_fate::complete;
  std::size_t drip_bytes = 0;
  std::chrono::milliseconds drip_interval{0};
};

/// A script that cannot be followed; what() names the problem.
class script_error : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

/// Whether a response with this status carries a body at all (RFC 9110:
/// 1xx, 204 and 304 do not), so body-shaping options make no sense for it.
bool status_has_body(unsigned status);

/// For `/status/{code}?{query}`: `code` is the path segment, `query` the raw
/// text after '?'. `now` anchors retry-after-date. Throws script_error.
response_plan parse_status_script(std::string_view code, std::string_view query,
                                  std::chrono::system_clock::time_point now);

/// For `/seq/{name}?{query}`: every step, first to last. Throws script_error.
std::vector<response_plan> parse_sequence_script(std::string_view query, std::chrono::system_clock::time_point now);

/// Decodes %XX escapes; throws script_error for a malformed one.
std::string percent_decode(std::string_view text);

} // namespace coretry::faults

#endif
