#ifndef CORETRY_FAULTS_IMF_FIXDATE_HPP
#define CORETRY_FAULTS_IMF_FIXDATE_HPP

#include <chrono>
#include <string>

namespace coretry::faults {

/// Formats `instant`, truncated to whole seconds, as an IMF-fixdate
/// (RFC 9110 §5.6.7), e.g. `Sun, 06 Nov 1994 08:49:37 GMT`. Independent of
/// the C locale and the time zone.
std::string format_imf_fixdate(std::chrono::system_clock::time_point instant);

} // namespace coretry::faults

#endif
