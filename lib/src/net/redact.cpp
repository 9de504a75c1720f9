#include <coretry/net/redact.hpp>

#include <boost/url/parse.hpp>
#include <boost/url/url.hpp>

#include <algorithm>
#include <array>
#include <optional>
#include <string>

namespace coretry::net {
namespace {

// The one list: a header or query parameter whose name contains one of these
// words (in any case) carries a credential: Authorization, Cookie,
// X-Api-Key, Ocp-Apim-Subscription-Key, X-Master-Key, x-functions-key,
// X-Auth-Token, X-Hub-Signature, a session id...
constexpr std::array<std::string_view, 9> credential_words{"key",    "token",  "secret",    "password", "auth",
                                                           "session", "cookie", "signature", "credential"};
// Short names that are credentials in query strings (?pwd=, ?pass=, ?jwt=,
// ?sig=); as header names they would hide too much.
constexpr std::array<std::string_view, 4> query_credential_words{"pwd", "pass", "jwt", "sig"};

// Names are short; longer ones count as sensitive rather than be copied.
constexpr std::size_t longest_checked_name = 256;

// Lower-cases `name` into `buffer` (ASCII only: names are tokens); empty
// when it does not fit.
std::optional<std::string_view> lowered(std::string_view name, std::array<char, longest_checked_name>& buffer) noexcept {
  if (name.size() > buffer.size()) return std::nullopt;
  std::transform(name.begin(), name.end(), buffer.begin(),
                 [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
  return std::string_view(buffer.data(), name.size());
}

template <std::size_t N>
bool contains_any(std::string_view text, const std::array<std::string_view, N>& words) noexcept {
  return std::any_of(words.begin(), words.end(),
                     [text](std::string_view word) { return text.find(word) != std::string_view::npos; });
}

} // namespace

bool is_sensitive_header(std::string_view name) noexcept {
  std::array<char, longest_checked_name> buffer;
  const auto name_lowered = lowered(name, buffer);
  if (!name_lowered) return true; // no credential-free name is worth the risk
  // Idempotency-Key names a request, it grants nothing: shown on purpose.
  if (*name_lowered == "idempotency-key") return false;
  return contains_any(*name_lowered, credential_words);
}

bool is_sensitive_query_parameter(std::string_view name) noexcept {
  std::array<char, longest_checked_name> buffer;
  const auto name_lowered = lowered(name, buffer);
  if (!name_lowered) return true;
  return contains_any(*name_lowered, credential_words) || contains_any(*name_lowered, query_credential_words);
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
      if (param.has_value && is_sensitive_query_parameter(param.key)) it = params.replace(it, {param.key, "REDACTED"});
    }
  }
  return std::string{url.buffer()};
}

std::string quoted_url_without_userinfo(std::string_view url) {
  std::size_t start = 0;
  const auto scheme = url.find("://");
  if (scheme != std::string_view::npos && scheme > 0) {
    bool letters = true;
    for (char c : url.substr(0, scheme))
      letters = letters && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                            c == '+' || c == '-' || c == '.');
    if (letters) start = scheme + 3;
  }
  const auto at = url.rfind('@');
  std::string out;
  if (at != std::string_view::npos && at >= start)
    out = std::string(url.substr(0, start)) + "***" + std::string(url.substr(at));
  else
    out = std::string(url);
  if (out.size() > 200) out.resize(200);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return "'" + out + "'";
}

} // namespace coretry::net
