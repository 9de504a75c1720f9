#ifndef CORETRY_COMMON_QUOTING_HPP
#define CORETRY_COMMON_QUOTING_HPP

#include <string>
#include <string_view>

namespace coretry::common {

/// `text` between single quotes, for an error message that names a value
/// someone typed or sent. The value is hostile: control bytes (and DEL) are
/// written as \xHH so that they cannot move the cursor or end the line, and
/// a backslash or single quote inside is escaped with a backslash so that
/// the quoted form reads back unambiguously. Other bytes (UTF-8 included)
/// are kept as they are.
std::string quoted(std::string_view text);

} // namespace coretry::common

#endif
