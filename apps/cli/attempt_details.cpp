#include "cli/attempt_details.hpp"

#include <boost/beast/http/field.hpp>

#include <algorithm>

namespace coretry::cli {

http::classifier_extension attempt_details::watcher() {
  return [this](const boost::system::error_code& ec, const http::exchange& x) -> std::optional<verdict> {
    record(ec, x);
    return std::nullopt;
  };
}

const attempt_detail* attempt_details::find(unsigned number) const noexcept {
  if (number == 0 || number > attempts_.size()) return nullptr;
  return &attempts_[number - 1];
}

void attempt_details::record(const boost::system::error_code& ec, const http::exchange& x) {
  attempt_detail& detail = attempts_.emplace_back();
  // The attempt's own error (a deadline) says more than the aborted I/O under it.
  if (ec) detail.error = ec.message();
  else if (x.error) detail.error = x.error.message();
  detail.problem = x.problem;
  detail.reached = http::to_string(x.reached);
  detail.reused_connection = x.reused_connection;
  if (x.address) detail.address = http::to_string(*x.address);
  detail.phases = x.phases;
  if (!x.res) return;
  detail.status = x.res->result_int();
  detail.reason = std::string{x.res->reason()};
  if (const auto field = x.res->find(boost::beast::http::field::retry_after); field != x.res->end())
    detail.retry_after = printable_utf8(field->value(), 100);
  detail.body_start = x.res->body().substr(0, body_start_limit);
}

curl_times as_curl_times(const phase_timings& phases) {
  curl_times times;
  duration so_far{};
  // The time from the start to the end of phase `p`, when the attempt went
  // through it: reached it and went on to a later one (a failed attempt's
  // last phase did not end).
  const auto through = [&](phase p) -> std::optional<duration> {
    const auto spent = phases[p];
    if (!spent) return std::nullopt;
    so_far += *spent;
    for (auto later = static_cast<std::size_t>(p) + 1; later < phase_count; ++later)
      if (phases.reached(static_cast<phase>(later))) return so_far;
    return std::nullopt;
  };
  through(phase::pool_wait);
  times.namelookup = through(phase::lookup);
  times.connect = through(phase::connect);
  times.appconnect = through(phase::tls);
  through(phase::write);
  times.starttransfer = through(phase::first_byte);
  times.total = phases.total();
  return times;
}

namespace {

// The length of the well-formed UTF-8 sequence at the start of `text`
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), or 0.
std::size_t utf8_sequence_length(std::string_view text) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xbf; // allowed range of the second byte
  if (lead >= 0xc2 && lead <= 0xdf) length = 2;
  else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;
    if (lead == 0xed) high = 0x9f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;
    if (lead == 0xf4) high = 0x8f;
  } else {
    return 0;
  }
  if (text.size() < length || byte(1) < low || byte(1) > high) return 0;
  for (std::size_t k = 2; k < length; ++k)
    if (byte(k) < 0x80 || byte(k) > 0xbf) return 0;
  return length;
}

} // namespace

std::string printable_utf8(std::string_view text, std::size_t limit) {
  constexpr std::string_view replacement = "\xEF\xBF\xBD";
  std::string result;
  result.reserve(std::min(text.size(), limit));
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = utf8_sequence_length(text.substr(i));
    const std::string_view piece = length ? text.substr(i, length) : replacement;
    if (result.size() + piece.size() > limit) break;
    result += piece;
    i += length ? length : 1;
  }
  return result;
}

} // namespace coretry::cli
