#include "common/quoting.hpp"

namespace coretry::common {

std::string quoted(std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string result;
  result.reserve(text.size() + 2);
  result += '\'';
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      result += "\\x";
      result += hex[byte >> 4];
      result += hex[byte & 0xf];
    } else {
      if (c == '\\' || c == '\'') result += '\\';
      result += c;
    }
  }
  result += '\'';
  return result;
}

} // namespace coretry::common
