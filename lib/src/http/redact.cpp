#include <coretry/http/redact.hpp>

#include <boost/url/parse.hpp>
#include <boost/url/url.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace coretry::http {
namespace {

// Query parameters whose values are credentials often enough to hide.
bool is_sensitive_parameter(std::string_view name) {
  std::string lowered{name};
  std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const std::string_view word : {"key", "token", "secret", "password", "passwd", "signature", "sig", "auth",
                                      "session", "credential"})
    if (lowered.find(word) != std::string::npos) return true;
  return false;
}

} // namespace

bool is_sensitive_header(std::string_view name) noexcept {
  // Field names are short; a fixed buffer keeps this allocation-free.
  std::array<char, 128> buffer;
  if (name.size() > buffer.size()) return true; // no such credential-free name is worth the risk
  std::transform(name.begin(), name.end(), buffer.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string_view lowered(buffer.data(), name.size());
  if (lowered == "authorization" || lowered == "proxy-authorization" || lowered == "cookie" ||
      lowered == "set-cookie" || lowered == "x-amz-security-token")
    return true;
  // Idempotency-Key names a request, it grants nothing.
  if (lowered == "idempotency-key") return false;
  for (const std::string_view word : {"api-key", "apikey", "api_key", "x-key", "token", "secret", "password",
                                      "session", "credential", "auth"})
    if (lowered.find(word) != std::string_view::npos) return true;
  return false;
}

std::string redact_url(std::string_view text) {
  auto parsed = boost::urls::parse_uri_reference(text);
  if (!parsed) {
    // Still shown, for the error that names it, without what could be a
    // password (before an '@') or a key (in the query).
    std::string shown{text.substr(0, text.find_first_of("?#"))};
    if (const auto at = shown.rfind('@'); at != std::string::npos) shown = "REDACTED" + shown.substr(at);
    return shown;
  }
  boost::urls::url url{*parsed};
  if (url.has_userinfo()) url.set_userinfo("REDACTED");
  if (url.has_query()) {
    auto params = url.params();
    for (auto it = params.begin(); it != params.end(); ++it) {
      const auto param = *it;
      if (param.has_value && is_sensitive_parameter(param.key)) it = params.replace(it, {param.key, "REDACTED"});
    }
  }
  return std::string{url.buffer()};
}

} // namespace coretry::http
