#include "bookstore/options.hpp"

#include <coretry/http/addresses.hpp>
#if CORETRY_BOOKSTORE_SHARED_STATE
#include <coretry/redis/credentials.hpp>
#include <coretry/redis/shared_state.hpp>
#include <coretry/redis/url.hpp>
#endif
#include <serving/listen_address.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <stdexcept>

namespace coretry::bookstore {

using std::chrono::milliseconds;
namespace serving = coretry::serving;

namespace {

/// Whole milliseconds (1 to `max_ms`) or a percentile ("p99.9", above 0 and
/// at most 100), the value of option `name`; one of the two is set.
struct ms_or_percentile {
  std::optional<double> percentile;
  std::chrono::milliseconds ms{};
};

ms_or_percentile parse_ms_or_percentile(std::string_view text, const char* name, std::int64_t max_ms,
                                        const char* example_ms) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument(std::string{name} + " '" + std::string{text.substr(0, 32)} + "': " + why);
  };
  const std::string forms = std::string{"give whole milliseconds ("} + example_ms + ") or a percentile (p99.9)";
  if (text.empty()) throw bad(forms);
  if (text.front() == 'p') {
    const std::string_view number = text.substr(1);
    // Digits, at most one point, at most 12 characters: no sign, exponent, inf or nan.
    const bool shaped = !number.empty() && number.size() <= 12 &&
                        std::all_of(number.begin(), number.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; }) &&
                        std::count(number.begin(), number.end(), '.') <= 1 && number.front() != '.' &&
                        number.back() != '.';
    double value = 0;
    if (!shaped || std::from_chars(number.data(), number.data() + number.size(), value).ec != std::errc{})
      throw bad("a percentile is p followed by a number, such as p99.9");
    if (!(value > 0.0 && value <= 100.0)) throw bad("a percentile must be above 0 and at most 100");
    return {value, {}};
  }
  std::int64_t ms = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (ec != std::errc{} || end != text.data() + text.size()) throw bad(forms);
  if (ms < 1 || ms > max_ms) throw bad("milliseconds must be between 1 and " + std::to_string(max_ms));
  return {std::nullopt, std::chrono::milliseconds{ms}};
}

} // namespace

void apply_attempt_timeout(std::string_view text, coretry::policy& p) {
  const ms_or_percentile v = parse_ms_or_percentile(text, "--attempt-timeout", 3'600'000, "250");
  if (v.percentile) {
    if (!p.observed) p.observed = coretry::observed_limit{};
    p.observed->percentile = *v.percentile;
    return;
  }
  p.attempt_limit = v.ms;
  p.observed.reset();
}

void apply_hedge_after(std::string_view text, coretry::policy& p) {
  const ms_or_percentile v = parse_ms_or_percentile(text, "--hedge-after", 60'000, "10");
  p.hedging.delay_percentile = v.percentile;
  if (!v.percentile) p.hedging.delay = v.ms;
}

void apply_concurrency_limit(std::string_view text, options& opts) {
  if (text == "off") {
    opts.concurrency_limit.reset();
    return;
  }
  opts.concurrency_limit = coretry::concurrency_limit::options{};
  if (text == "adaptive") return;
  unsigned permits = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), permits);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || permits < 1 || permits > 100'000)
    throw std::invalid_argument("--concurrency-limit '" + std::string{text} +
                                "': expected adaptive, off, or a number of permits from 1 to 100000");
  opts.concurrency_limit->adaptive = false;
  opts.concurrency_limit->initial_limit = permits;
  opts.concurrency_limit->min_limit = 1;
  opts.concurrency_limit->max_limit = permits;
}

void validate(const options& opts) {
  (void)serving::parse_listen_address(opts.listen);
  if (!opts.pricing_url.starts_with("http://") && !opts.pricing_url.starts_with("https://"))
    throw std::invalid_argument("pricing URL '" + opts.pricing_url + "' must start with http:// or https://");
  if (!opts.pricing_ca_file.empty()) {
    if (!opts.pricing_url.starts_with("https://"))
      throw std::invalid_argument("--pricing-cacert needs an https:// pricing URL");
    if (auto problem = http::ca_file_problem(opts.pricing_ca_file))
      throw std::invalid_argument("--pricing-cacert: " + *problem);
  }
  if (auto problem = opts.policy.validate()) throw std::invalid_argument("policy: " + *problem);
  if (opts.max_deadline <= milliseconds::zero()) throw std::invalid_argument("the maximum deadline must be positive");
  if (opts.reserve < milliseconds::zero()) throw std::invalid_argument("the reserve may not be negative");
  if (opts.reserve >= opts.max_deadline)
    throw std::invalid_argument("the reserve must be shorter than the maximum deadline");
  if (opts.shutdown_grace < milliseconds::zero()) throw std::invalid_argument("the shutdown grace may not be negative");
  if (opts.max_connections == 0) throw std::invalid_argument("at least one connection to the pricing service");
  for (const auto& entry : opts.pricing_resolve) (void)coretry::http::parse_resolve_entry(entry);
  if (opts.gate) (void)gate_model{opts.gate_options}; // throws naming the bad option
  if (opts.concurrency_limit) (void)coretry::concurrency_limit{*opts.concurrency_limit}; // likewise
  if (!opts.shared_state.empty()) {
#if CORETRY_BOOKSTORE_SHARED_STATE
    if (auto problem = redis::url_problem(opts.shared_state)) throw std::invalid_argument("--shared-state: " + *problem);
    if (opts.reconcile_period < milliseconds(1) || opts.reconcile_period > milliseconds(60000))
      throw std::invalid_argument("the reconciliation period must be between 1 and 60000 ms");
    if (auto problem = redis::prefix_problem(opts.shared_state_prefix))
      throw std::invalid_argument("--shared-state-prefix: " + *problem);
    redis::endpoint server = redis::parse_url(opts.shared_state);
    try {
      redis::use_credentials(server, {opts.shared_state_user, opts.shared_state_password});
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--shared-state: ") + e.what());
    }
    const auto& tls = opts.shared_state_tls;
    if (!tls.ca_file.empty() || !tls.cert_file.empty() || !tls.key_file.empty()) {
      if (!server.tls)
        throw std::invalid_argument("--shared-state-cacert, --shared-state-cert and --shared-state-key need a rediss:// URL");
      if (!tls.ca_file.empty())
        if (auto problem = http::ca_file_problem(tls.ca_file)) throw std::invalid_argument("--shared-state-cacert: " + *problem);
      if (!tls.cert_file.empty() && tls.key_file.empty())
        throw std::invalid_argument("--shared-state-cert: a client certificate ('" + tls.cert_file +
                                    "') needs its key (--shared-state-key)");
      if (auto problem = http::tls_files_problem({{}, tls.cert_file, tls.key_file, {}}))
        throw std::invalid_argument("--shared-state-cert, --shared-state-key: " + *problem);
    }
#else
    throw std::invalid_argument("--shared-state needs coretry::redis, which this build left out (no hiredis)");
#endif
  }
  if (auto problem = coretry::serving::validate(opts.limits)) throw std::invalid_argument(*problem);
  if (opts.max_clients == 0 || opts.max_clients > most_clients)
    throw std::invalid_argument("the client connection cap must be between 1 and " + std::to_string(most_clients));
}

void read_shared_state_credentials(options& opts) {
  if (opts.shared_state.empty()) return;
#if CORETRY_BOOKSTORE_SHARED_STATE
  auto given = redis::read_credentials(opts.shared_state_password_file);
  opts.shared_state_user = std::move(given.user);
  opts.shared_state_password = std::move(given.password);
#endif
}

} // namespace coretry::bookstore
