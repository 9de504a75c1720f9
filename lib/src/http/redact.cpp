#include <coretry/http/redact.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace coretry::http {

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

} // namespace coretry::http
