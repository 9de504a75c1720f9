#ifndef CORETRY_CLI_FETCH_HPP
#define CORETRY_CLI_FETCH_HPP

#include "cli/command_line.hpp"

#include <coretry/http/client.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

// `coretry fetch`: one HTTP request under a retry policy, with curl's habits.
namespace coretry::cli {

/// The fetch options exactly as given; make_fetch_plan checks them. Text,
/// not numbers, so that every refusal can name the option and the value.
struct fetch_arguments {
  std::string url;
  std::optional<std::string> method;
  std::vector<std::string> headers;
  std::vector<std::string> data;
  std::vector<std::string> resolve; ///< --resolve HOST:PORT:ADDR[,ADDR...]
  std::optional<std::string> balance; ///< --balance least_cost|first_to_connect
  std::optional<std::string> output;
  std::optional<std::string> max_filesize;
  std::optional<std::string> stdout_limit;
  bool verbose = false;
  bool json = false;
  bool no_progress = false;
  bool location = false;         ///< -L
  bool location_trusted = false; ///< --location-trusted (implies -L)
  std::optional<std::string> max_redirs;

  std::optional<std::string> max_attempts;
  std::optional<std::string> retry;
  std::optional<std::string> max_time;
  std::optional<std::string> attempt_timeout;
  std::optional<std::string> connect_timeout;
  std::optional<std::string> idle_timeout;
  std::optional<std::string> backoff_initial;
  std::optional<std::string> backoff_cap;
  std::optional<std::string> jitter;
  std::optional<std::string> hedge_after;
  std::optional<std::string> max_hedges;
  std::optional<std::string> idempotency_key;
  std::optional<std::string> cacert;
  std::optional<std::string> cert;
  std::optional<std::string> key;
  std::optional<std::string> key_password_file;
  std::optional<std::string> key_password_env;
  /// -x: given (even empty, which turns the environment's proxy off) or not.
  std::optional<std::string> proxy;
  std::optional<std::string> noproxy;
  std::optional<std::string> out_of_credits_header;
  std::optional<std::string> permanent_5xx_body;
};

/// The values used when an option is not given. The policy's own defaults are
/// the book-detail read (1 s overall, 250 ms per attempt), too tight for
/// arbitrary URLs from a terminal; these suit a person waiting.
namespace fetch_defaults {
inline constexpr unsigned max_attempts = 3;
inline constexpr std::chrono::seconds max_time{30};
inline constexpr std::chrono::seconds attempt_timeout{10};
inline constexpr std::chrono::milliseconds min_attempt_allowance{100};
inline constexpr std::chrono::milliseconds completion_reserve{50};
inline constexpr std::chrono::milliseconds backoff_initial{100};
inline constexpr std::chrono::seconds backoff_cap{1};
inline constexpr unsigned most_attempts = 1000;
/// Redirects followed with -L (curl's default); --max-redirs takes 0 to the
/// client's cap (http::redirect_options::max_redirects_cap).
inline constexpr unsigned max_redirs = 50;
/// Without -o the body is held in memory until the request succeeds.
inline constexpr std::uint64_t stdout_limit = 8 * 1024 * 1024;
inline constexpr std::uint64_t largest_stdout_limit = std::uint64_t{1} << 30;
/// The largest --max-filesize: 2^62 bytes, as good as none.
inline constexpr std::uint64_t largest_filesize = std::uint64_t{1} << 62;
} // namespace fetch_defaults

/// The timing options mapped onto a policy. Always valid: a small --max-time
/// shrinks the reserve and the minimum allowance instead of producing a
/// policy no attempt could start under:
///   attempt limit     = --attempt-timeout, else min(10 s, max-time)
///   completion reserve = min(50 ms, max-time / 10)
///   minimum allowance = min(100 ms, attempt limit, max-time - reserve)
/// Throws usage_error for a bad value or an impossible combination.
coretry::policy make_policy(const fetch_arguments& args);

/// A checked fetch: everything needed to send, nothing sent yet.
struct fetch_plan {
  std::string url;
  http::request request;
  std::vector<header_field> headers; ///< the -H fields as given (also in `request`)
  coretry::policy policy;
  http::client_options client;
  /// The proxy this URL goes through, credentials redacted; empty: directly.
  std::string proxy_shown;
  std::optional<std::string> idempotency_key;
  std::vector<http::classifier_extension> classifiers;
  /// -L, --max-redirs, --location-trusted.
  http::redirect_options redirects;
  std::optional<std::string> output;
  std::optional<std::uint64_t> max_filesize;
  bool verbose = false;
  bool json = false;
  bool progress = true;
};

/// Checks every argument. Throws usage_error (one line naming the problem)
/// for anything that would make the request wrong or impossible. Without -x
/// the proxy comes from the environment (http::proxy_from_environment, as
/// curl reads it), and without --noproxy the list from NO_PROXY.
fetch_plan make_fetch_plan(const fetch_arguments& args);

/// Runs the request: body to stdout (or -o) on success, a one-line error on
/// stderr otherwise, JSON on stdout with --json. Returns the exit status.
/// Throws usage_error for problems found only when preparing the request.
int run_fetch(const fetch_plan& plan);

} // namespace coretry::cli

#endif
