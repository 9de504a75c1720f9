#ifndef CORETRY_CLI_ATTEMPT_DETAILS_HPP
#define CORETRY_CLI_ATTEMPT_DETAILS_HPP

#include <coretry/http/addresses.hpp>
#include <coretry/http/classify.hpp>
#include <coretry/http/exchange.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coretry::cli {

/// What one attempt's exchange showed, beyond the engine's attempt_record
/// (which keeps the verdict but not the HTTP status of every attempt).
struct attempt_detail {
  std::optional<unsigned> status;       ///< the HTTP status, when a complete response arrived
  std::string reason;                   ///< its reason phrase
  std::string error;                    ///< the transport or attempt error, if any
  std::string problem;                  ///< the validation hook's complaint, if any
  std::string_view reached = "waiting_for_connection"; ///< how far the attempt got
  bool reused_connection = false;
  std::string address;                  ///< the connection's address ("127.0.0.2:8080"), empty without one
  phase_timings phases;           ///< where the attempt's time went
  std::optional<std::string> retry_after; ///< the Retry-After field as sent
  std::string body_start;               ///< the first bytes of the body, for diagnosis
};

/// Watches every attempt through a classifier extension that always defers,
/// so the classification itself is unchanged. Put its extension first.
/// The engine classifies an attempt before telling observers it finished, so
/// an observer's attempt_finished can read that attempt's detail here.
class attempt_details {
public:
  /// How much of each body is kept.
  static constexpr std::size_t body_start_limit = 512;

  /// The extension; `this` must outlive every request it is given to.
  http::classifier_extension watcher();

  const std::vector<attempt_detail>& attempts() const noexcept { return attempts_; }
  /// Attempt `number` (1-based), or null if it was never classified.
  const attempt_detail* find(unsigned number) const noexcept;

private:
  void record(const boost::system::error_code& ec, const http::exchange& x);

  std::vector<attempt_detail> attempts_;
};

/// An attempt's phases as curl's cumulative times (`-w`'s time_namelookup,
/// time_connect, time_appconnect, time_starttransfer, time_total): each the
/// time from the attempt's start to the end of that step, none when the
/// attempt never went through it (a reused connection: no lookup, connect
/// or handshake; plain http: no handshake).
struct curl_times {
  std::optional<duration> namelookup;
  std::optional<duration> connect;
  std::optional<duration> appconnect;
  std::optional<duration> starttransfer;
  duration total{};
};
curl_times as_curl_times(const phase_timings& phases);

/// `text` with invalid UTF-8 replaced by U+FFFD and cut to at most `limit`
/// bytes on a character boundary: safe to put in JSON or on a terminal.
std::string printable_utf8(std::string_view text, std::size_t limit);

} // namespace coretry::cli

#endif
