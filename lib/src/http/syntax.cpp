#include <coretry/http/syntax.hpp>

#include <algorithm>

namespace coretry::http {

namespace {

bool is_tchar(char c) {
  static constexpr std::string_view specials = "!#$%&'*+-.^_`|~";
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         specials.find(c) != std::string_view::npos;
}

} // namespace

bool is_token(std::string_view text) { return !text.empty() && std::all_of(text.begin(), text.end(), is_tchar); }

bool is_field_value(std::string_view text) {
  return std::none_of(text.begin(), text.end(),
                      [](char c) { return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == '\x7f'; });
}

} // namespace coretry::http
