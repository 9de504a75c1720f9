#include "cli/fetch.hpp"

#include "cli/attempt_details.hpp"
#include "cli/exit_status.hpp"
#include "cli/output_file.hpp"
#include "cli/progress.hpp"
#include "cli/report.hpp"

#include <common/quoting.hpp>
#include <coretry/http/idempotency.hpp>
#include <coretry/http/addresses.hpp>
#include <coretry/http/proxy.hpp>
#include <coretry/http/tls.hpp>
#include <coretry/http/url.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>
#include <boost/json/serialize.hpp>
#include <boost/url/parse.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include <unistd.h>

namespace coretry::cli {
namespace {

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;

using coretry::common::quoted;

std::optional<duration> optional_seconds(std::string_view option, const std::optional<std::string>& text,
                                         bool zero_allowed) {
  if (!text) return std::nullopt;
  return parse_seconds(option, *text, zero_allowed);
}

void check_url(const std::string& url) {
  if (auto problem = http::url_problem(url)) throw usage_error(*problem);
}

std::string read_data_file(const std::string& path) {
  const bool from_stdin = path == "-";
  std::FILE* file = from_stdin ? stdin : std::fopen(path.c_str(), "rb");
  if (!file) throw usage_error("-d @" + path + ": cannot read it: " + std::strerror(errno));
  std::string content;
  char buffer[65536];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) content.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  if (!from_stdin) std::fclose(file);
  if (failed) throw usage_error("-d @" + path + ": cannot read it: " + std::strerror(error));
  return content;
}

// curl's -d: each value verbatim, or a file's contents with @FILE; several
// are joined with '&'.
std::string request_body(const std::vector<std::string>& data) {
  std::string body;
  for (std::size_t i = 0; i < data.size(); ++i) {
    if (i) body += '&';
    const std::string& item = data[i];
    body += item.starts_with('@') ? read_data_file(item.substr(1)) : item;
  }
  return body;
}

// Checked here so that a wrong file is bad input: at handshake time it
// would look like a transient TLS failure and be retried.
void check_ca_file(const std::string& path) {
  if (auto problem = http::ca_file_problem(path)) throw usage_error("--cacert: " + *problem);
}

// A key's password from a file: its first line, at most 1 KiB.
std::string read_password_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) throw usage_error("--key-password-file: cannot read '" + path + "': " + std::strerror(errno));
  char buffer[1026];
  const std::size_t n = std::fread(buffer, 1, sizeof buffer, file);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) throw usage_error("--key-password-file: cannot read '" + path + "': " + std::strerror(error));
  std::string password(buffer, n);
  password = password.substr(0, password.find_first_of("\r\n"));
  if (password.size() > 1024) throw usage_error("--key-password-file: the password is longer than 1024 bytes");
  if (password.empty()) throw usage_error("--key-password-file: '" + path + "' holds no password on its first line");
  return password;
}

// --cert, --key and the key's password: checked here, so that a missing or
// wrong file is bad input before anything is sent.
void set_client_certificate(const fetch_arguments& args, http::client_options& client) {
  if (!args.cert) {
    if (args.key || args.key_password_file || args.key_password_env)
      throw usage_error(std::string{args.key ? "--key" : args.key_password_file ? "--key-password-file" : "--key-password-env"} +
                        " needs --cert");
    return;
  }
  if (args.key_password_file && args.key_password_env)
    throw usage_error("--key-password-file and --key-password-env both give the key's password; give only one");
  if (args.key_password_file) client.private_key_password = read_password_file(*args.key_password_file);
  if (args.key_password_env) {
    const char* value = std::getenv(args.key_password_env->c_str());
    if (!value) throw usage_error("--key-password-env: the variable " + quoted(*args.key_password_env) + " is not set");
    client.private_key_password = value;
  }
  client.certificate_file = *args.cert;
  client.private_key_file = args.key.value_or("");
  if (auto problem = http::tls_files_problem(
          {{}, client.certificate_file, client.private_key_file, client.private_key_password}))
    throw usage_error((args.key ? "--cert/--key: " : "--cert: ") + *problem);
}

// -x, or the environment's proxy for this URL's scheme; --noproxy, or NO_PROXY.
void set_proxy(const fetch_arguments& args, const http::url_parts& url, fetch_plan& plan) {
  const http::proxy_environment env = http::proxy_from_environment(url.tls);
  const std::string source = args.proxy ? "-x" : env.proxy_variable;
  plan.client.proxy = args.proxy ? *args.proxy : env.proxy;
  plan.client.no_proxy = args.noproxy ? *args.noproxy : env.no_proxy;
  if (plan.client.proxy.empty()) return;
  if (auto problem = http::proxy_url_problem(plan.client.proxy)) throw usage_error(source + ": " + *problem);
  if (!http::bypasses_proxy(plan.client.no_proxy, url.host))
    plan.proxy_shown = http::parse_proxy_url(plan.client.proxy).shown;
}

std::string checked_idempotency_key(const std::string& key) {
  if (key == "auto") return http::new_idempotency_key();
  const bool printable = std::all_of(key.begin(), key.end(), [](char c) { return c >= 0x21 && c <= 0x7e; });
  if (key.empty() || key.size() > 255 || !printable)
    throw usage_error("--idempotency-key: give 'auto' or 1 to 255 visible ASCII characters without spaces");
  return key;
}

http::classifier_extension out_of_credits_rule(const std::string& text) {
  const auto equals = text.find('=');
  if (equals == std::string::npos)
    throw usage_error("--out-of-credits-header: write it as NAME=VALUE, e.g. x-api-remaining-credits=0");
  const std::string name = text.substr(0, equals);
  const std::string value = text.substr(equals + 1);
  if (!is_token(name)) throw usage_error("--out-of-credits-header: " + quoted(name) + " is not a field name");
  if (value.find_first_of(std::string_view{"\r\n\0", 3}) != std::string::npos)
    throw usage_error("--out-of-credits-header: the value contains CR, LF or NUL");
  return http::permanent_429_when_header(name, value);
}

http::classifier_extension permanent_5xx_rule(const std::string& pattern) {
  try {
    return http::permanent_5xx_when_body_matches(pattern, http::letter_case::insensitive);
  } catch (const std::invalid_argument& error) {
    // The library names itself first; the option is the name users know.
    const std::string_view what = error.what();
    const auto separator = what.find(": ");
    throw usage_error("--permanent-5xx-body: " +
                      std::string{separator == std::string_view::npos ? what : what.substr(separator + 2)});
  }
}

bool has_field(const std::vector<header_field>& headers, std::string_view name) {
  return std::any_of(headers.begin(), headers.end(),
                     [&](const header_field& field) { return boost::beast::iequals(field.name, name); });
}

std::string policy_summary(const coretry::policy& p) {
  return std::to_string(p.max_attempts) + " attempt" + (p.max_attempts == 1 ? "" : "s") + ", " +
         describe_duration(p.overall_deadline) + " overall, " + describe_duration(p.attempt_limit) +
         " per attempt (at least " + describe_duration(p.min_attempt_allowance) + ", " +
         describe_duration(p.completion_reserve) + " reserve), backoff " + std::string{to_string(p.backoff.jitter)} +
         " jitter in windows from " + describe_duration(p.backoff.initial_window) + " to " +
         describe_duration(p.backoff.max_window);
}

boost::json::object describe_policy(const fetch_plan& plan) {
  const coretry::policy& p = plan.policy;
  const auto optional_ms = [](duration d) -> boost::json::value {
    if (d == duration::zero()) return nullptr;
    return whole_ms(d);
  };
  return boost::json::object{{"max_attempts", p.max_attempts},
                             {"max_time_ms", whole_ms(p.overall_deadline)},
                             {"attempt_timeout_ms", whole_ms(p.attempt_limit)},
                             {"min_attempt_allowance_ms", whole_ms(p.min_attempt_allowance)},
                             {"completion_reserve_ms", whole_ms(p.completion_reserve)},
                             {"backoff_initial_ms", whole_ms(p.backoff.initial_window)},
                             {"backoff_cap_ms", whole_ms(p.backoff.max_window)},
                             {"jitter", to_string(p.backoff.jitter)},
                             {"connect_timeout_ms", optional_ms(plan.client.connect_timeout)},
                             {"idle_timeout_ms", optional_ms(plan.client.idle_timeout)}};
}

std::string_view signal_name(int signal) {
  switch (signal) {
  case SIGINT: return "SIGINT";
  case SIGTERM: return "SIGTERM";
  }
  return "a signal";
}

std::string header_line(std::string_view name, std::string_view value) {
  return std::string{name} + ": " + (is_sensitive_header(name) ? std::string{"[redacted]"} : printable_utf8(value, 200));
}

/// The -v timeline, and the progress line kept up to date, from one observer.
class fetch_observer final : public retry_observer {
public:
  fetch_observer(timeline* printer, progress_line& progress, unsigned max_attempts, output_file* output)
      : printer_(printer), progress_(progress), max_attempts_(max_attempts), output_(output) {}

  void attempt_started(const attempt_started_event& e) noexcept override {
    // Each attempt's body starts over: nothing of an earlier one is kept.
    if (output_) output_->begin_attempt();
    try {
      progress_.attempt_started(e.attempt, max_attempts_);
    } catch (...) {
    }
    if (printer_) printer_->attempt_started(e);
  }
  void attempt_finished(const attempt_finished_event& e) noexcept override {
    if (printer_) printer_->attempt_finished(e);
  }
  void backoff_scheduled(const backoff_event& e) noexcept override {
    try {
      progress_.waiting(e.wait);
    } catch (...) {
    }
    if (printer_) printer_->backoff_scheduled(e);
  }
  void stopped(const stop_event& e) noexcept override {
    if (printer_) printer_->stopped(e);
  }

private:
  timeline* printer_;
  progress_line& progress_;
  unsigned max_attempts_;
  output_file* output_;
};

/// -o: why an attempt that wrote to the output failed, and the rule that an
/// attempt whose bytes went where they cannot be taken back is not retried.
http::classifier_extension output_rule(const output_file& output) {
  return [&output](const boost::system::error_code& ec, const http::exchange& x) -> std::optional<verdict> {
    const boost::system::error_code& failure = ec ? ec : x.error;
    if (failure == output_error::too_large) return verdict::permanent("max_filesize", delivery::unknown);
    if (failure == output_error::write_failed) return verdict::permanent("output_not_written", delivery::unknown);
    if (output.wrote_directly()) {
      const verdict v = http::classify_exchange(ec, x);
      if (v.status != attempt_status::success) return verdict::permanent("output_already_written", v.delivered);
    }
    return std::nullopt;
  };
}

bool write_stdout(std::string_view content) {
  return std::fwrite(content.data(), 1, content.size(), stdout) == content.size() && std::fflush(stdout) == 0;
}

/// -v: what is about to be sent, credentials redacted.
void print_request(const fetch_plan& plan) {
  std::fprintf(stderr, "* %s %s\n", std::string{plan.request.method_string()}.c_str(), redact_url(plan.url).c_str());
  std::fprintf(stderr, "* policy: %s\n", policy_summary(plan.policy).c_str());
  if (!plan.proxy_shown.empty()) std::fprintf(stderr, "* through the proxy %s\n", plan.proxy_shown.c_str());
  // The fields as given and as derived from -d; the client adds Host,
  // User-Agent and Content-Length.
  for (const auto& field : plan.request)
    std::fprintf(stderr, "> %s\n", header_line(field.name_string(), field.value()).c_str());
  if (plan.idempotency_key) std::fprintf(stderr, "> Idempotency-Key: %s\n", plan.idempotency_key->c_str());
  if (!plan.request.body().empty()) std::fprintf(stderr, "> (%zu bytes of body)\n", plan.request.body().size());
}

/// -v: the redirects followed, in order.
void print_redirects(const std::vector<http::redirect_hop>& hops) {
  for (const auto& hop : hops)
    std::fprintf(stderr, "* redirect: %s %s answered %u (%s) -> %s\n", hop.method.c_str(), hop.url.c_str(), hop.status,
                 hop.address ? http::to_string(*hop.address).c_str() : "no address",
                 printable_utf8(hop.target, 512).c_str());
}

/// -v: the last response's status line and fields, credentials redacted.
void print_response(const http::response& response) {
  std::fprintf(stderr, "< HTTP/%u.%u %u %s\n", response.version() / 10, response.version() % 10,
               response.result_int(), printable_utf8(response.reason(), 60).c_str());
  for (const auto& field : response)
    std::fprintf(stderr, "< %s\n", header_line(field.name_string(), field.value()).c_str());
}

/// --json: the outcome, and what this command asked for.
boost::json::object outcome_json(const fetch_plan& plan, const http::result& result, const attempt_details& details,
                                 const output_file* output, int status, int interrupted_by) {
  boost::json::object json = describe_outcome(result, details);
  if (output && result.value && result.value->res && result.value->res->body().empty()) {
    // The body went to -o as it arrived, not into the response.
    json["body_bytes"] = output->attempt_bytes();
    json["body_start"] = printable_utf8(output->attempt_start(), attempt_details::body_start_limit);
  }
  json["exit_status"] = status;
  json["method"] = std::string{plan.request.method_string()};
  json["url"] = redact_url(plan.url);
  json["idempotency_key"] = plan.idempotency_key ? boost::json::value(*plan.idempotency_key) : nullptr;
  json["interrupted_by"] = interrupted_by ? boost::json::value(signal_name(interrupted_by)) : nullptr;
  json["policy"] = describe_policy(plan);
  json["proxy"] = plan.proxy_shown.empty() ? boost::json::value(nullptr) : boost::json::value(plan.proxy_shown);
  boost::json::array hops;
  if (result.value)
    for (const auto& hop : result.value->redirects)
      hops.push_back(boost::json::object{
          {"method", hop.method},
          {"url", hop.url},
          {"status", hop.status},
          {"location", printable_utf8(hop.location, http::redirect_options::max_location_length)},
          {"target", printable_utf8(hop.target, http::redirect_options::max_location_length)},
          {"address", hop.address ? boost::json::value(http::to_string(*hop.address)) : nullptr}});
  json["redirects"] = std::move(hops);
  json["redirect_error"] = result.last_error.category() == http::redirect_error_category()
                               ? boost::json::value(result.value ? result.value->problem : result.last_error.message())
                               : nullptr;
  return json;
}

/// What the proxy had to do with a failure, naming it: "" when nothing.
std::string proxy_failure(const http::exchange& x) {
  if (x.error == http::proxy_error::refused)
    return "; the proxy " + x.proxy + " refused the tunnel with HTTP " + std::to_string(x.proxy_status) +
           (x.proxy_status == 407 ? " (it wants credentials: give them in the proxy URL)" : "");
  if (x.error == http::proxy_error::bad_answer) return "; the proxy " + x.proxy + " gave no usable answer to CONNECT";
  if (x.res && x.res->result_int() == 407)
    return "; the proxy " + x.proxy + " wants credentials (407): give them in the proxy URL";
  return {};
}

} // namespace

coretry::policy make_policy(const fetch_arguments& args) {
  coretry::policy p;
  if (args.max_attempts && args.retry)
    throw usage_error("--retry and --max-attempts both set the number of attempts; give only one");
  p.max_attempts = fetch_defaults::max_attempts;
  if (args.max_attempts) p.max_attempts = parse_count("--max-attempts", *args.max_attempts, 1, fetch_defaults::most_attempts);
  if (args.retry) p.max_attempts = parse_count("--retry", *args.retry, 0, fetch_defaults::most_attempts - 1) + 1;

  const duration max_time = optional_seconds("--max-time", args.max_time, false).value_or(fetch_defaults::max_time);
  p.overall_deadline = max_time;
  p.attempt_limit = optional_seconds("--attempt-timeout", args.attempt_timeout, false)
                        .value_or(std::min<duration>(fetch_defaults::attempt_timeout, max_time));
  p.completion_reserve = std::min<duration>(fetch_defaults::completion_reserve, max_time / 10);
  p.min_attempt_allowance =
      std::min<duration>({fetch_defaults::min_attempt_allowance, p.attempt_limit, max_time - p.completion_reserve});

  const auto initial = optional_seconds("--backoff-initial", args.backoff_initial, true);
  const auto cap = optional_seconds("--backoff-cap", args.backoff_cap, true);
  if (initial && cap && *initial > *cap)
    throw usage_error("--backoff-initial (" + describe_duration(*initial) + ") is larger than --backoff-cap (" +
                      describe_duration(*cap) + "); the first window cannot exceed the cap");
  // Given one of the two, the other follows it rather than contradicting it.
  p.backoff.initial_window =
      initial.value_or(cap ? std::min<duration>(fetch_defaults::backoff_initial, *cap) : fetch_defaults::backoff_initial);
  p.backoff.max_window = cap.value_or(std::max<duration>(fetch_defaults::backoff_cap, p.backoff.initial_window));
  if (args.jitter) {
    const auto kind = parse_jitter_kind(*args.jitter);
    if (!kind)
      throw usage_error("--jitter: " + quoted(*args.jitter) + " is not one of none, full, equal, decorrelated");
    p.backoff.jitter = *kind;
  }
  if (args.max_hedges && !args.hedge_after)
    throw usage_error("--max-hedges needs --hedge-after (the delay before a hedge is sent)");
  if (args.hedge_after) {
    p.hedging.delay = *optional_seconds("--hedge-after", args.hedge_after, false);
    p.hedging.max_hedges =
        args.max_hedges ? parse_count("--max-hedges", *args.max_hedges, 1, coretry::policy::max_hedges_cap) : 1;
  }
  // The rules above always produce a valid policy; this guards the rules.
  if (auto problem = p.validate()) throw usage_error("the timing options give an unusable policy: " + *problem);
  return p;
}

fetch_plan make_fetch_plan(const fetch_arguments& args) {
  fetch_plan plan;
  check_url(args.url);
  plan.url = args.url;
  plan.policy = make_policy(args);

  for (std::size_t i = 0; i < args.headers.size(); ++i) plan.headers.push_back(parse_header(args.headers[i], i + 1));

  std::string method = args.data.empty() ? "GET" : "POST";
  if (args.method) {
    if (!is_token(*args.method)) throw usage_error("-X: " + quoted(*args.method) + " is not an HTTP method name");
    method = *args.method;
  }
  plan.request.version(11);
  plan.request.method_string(method);
  for (const header_field& field : plan.headers) plan.request.insert(field.name, field.value);
  if (!args.data.empty()) {
    plan.request.body() = request_body(args.data);
    if (!has_field(plan.headers, "Content-Type"))
      plan.request.set(beast_http::field::content_type, "application/x-www-form-urlencoded");
  }

  if (args.idempotency_key) {
    if (has_field(plan.headers, "Idempotency-Key"))
      throw usage_error("--idempotency-key and -H 'Idempotency-Key: ...' both give a key; give only one");
    plan.idempotency_key = checked_idempotency_key(*args.idempotency_key);
  }

  plan.client.connect_timeout = optional_seconds("--connect-timeout", args.connect_timeout, true).value_or(duration::zero());
  plan.client.idle_timeout = optional_seconds("--idle-timeout", args.idle_timeout, true).value_or(duration::zero());
  if (args.cacert) {
    check_ca_file(*args.cacert);
    plan.client.ca_file = *args.cacert;
  }
  set_client_certificate(args, plan.client);
  set_proxy(args, http::parse_url(args.url), plan);
  for (const auto& entry : args.resolve) {
    try {
      (void)http::parse_resolve_entry(entry);
    } catch (const std::invalid_argument& e) {
      throw usage_error(std::string("--resolve: ") + e.what());
    }
    plan.client.resolve.push_back(entry);
  }
  if (args.balance) {
    const auto mode = http::parse_balance_mode(*args.balance);
    if (!mode) throw usage_error("--balance: " + quoted(*args.balance) + " is not least_cost or first_to_connect");
    plan.client.balance = *mode;
  }

  if (args.out_of_credits_header) plan.classifiers.push_back(out_of_credits_rule(*args.out_of_credits_header));
  if (args.permanent_5xx_body) plan.classifiers.push_back(permanent_5xx_rule(*args.permanent_5xx_body));

  if (args.output && *args.output != "-") plan.output = args.output; // curl's "-o -" is stdout
  if (args.max_filesize)
    plan.max_filesize = parse_size("--max-filesize", *args.max_filesize, fetch_defaults::largest_filesize);
  // -o streams a 2xx body to the file; other bodies (and, without -o, the
  // body printed on success) are held in memory, within this limit.
  if (args.stdout_limit && plan.output)
    throw usage_error("--stdout-limit bounds the body held for stdout; with -o the body streams to the file "
                      "(bound it with --max-filesize)");
  std::uint64_t memory_limit = fetch_defaults::stdout_limit;
  if (args.stdout_limit)
    memory_limit = parse_size("--stdout-limit", *args.stdout_limit, fetch_defaults::largest_stdout_limit);
  if (!plan.output && plan.max_filesize) memory_limit = std::min(memory_limit, *plan.max_filesize);
  plan.client.body_limit = memory_limit;
  if (args.max_redirs && !args.location && !args.location_trusted)
    throw usage_error("--max-redirs needs -L (without it no redirect is followed)");
  plan.redirects.follow = args.location || args.location_trusted;
  plan.redirects.trusted = args.location_trusted;
  plan.redirects.max_redirects =
      args.max_redirs ? parse_count("--max-redirs", *args.max_redirs, 0, http::redirect_options::max_redirects_cap)
                      : fetch_defaults::max_redirs;
  plan.verbose = args.verbose;
  plan.json = args.json;
  // The timeline already shows progress; two writers on one line garble it.
  plan.progress = !args.no_progress && !args.verbose;
  return plan;
}

int run_fetch(const fetch_plan& plan) {
  // Created first: an unusable -o is bad input, found before anything is sent.
  std::optional<output_file> output;
  if (plan.output && plan.policy.hedging.max_hedges > 0)
    throw usage_error("--hedge-after cannot be used with -o: the body is written as it arrives, and attempts "
                      "running at once would write to one output");
  if (plan.output) output.emplace(*plan.output, plan.max_filesize);

  asio::io_context io{1};
  // The client, its operations and the signal handler share one strand, so
  // cancellation is emitted from the operation's own executor.
  const asio::any_io_executor strand = asio::make_strand(io);
  std::optional<http::client> client;
  try {
    client.emplace(strand, plan.client);
  } catch (const std::invalid_argument& error) {
    throw usage_error(error.what());
  }

  const auto parsed_url = boost::urls::parse_uri(plan.url);
  const std::string label = std::string{plan.request.method_string()} + " " + std::string{parsed_url->encoded_host()};
  progress_line progress(strand, stderr, plan.progress && ::isatty(STDERR_FILENO) == 1, label);
  attempt_details details;
  std::optional<timeline> printer;
  if (plan.verbose) printer.emplace(stderr, "* ", plan.policy.max_attempts, details, [&progress] { progress.clear(); });
  fetch_observer observer(printer ? &*printer : nullptr, progress, plan.policy.max_attempts,
                          output ? &*output : nullptr);

  http::request_options options;
  options.policy = plan.policy;
  options.route = "fetch";
  options.idempotency_key = plan.idempotency_key;
  options.observer = &observer;
  options.redirects = plan.redirects;
  options.classifiers.push_back(details.watcher()); // first: it sees every attempt
  if (output) {
    // A 2xx body streams into the output as it arrives; others stay in
    // memory for the classifiers (a 5xx body rule) and are never written.
    options.stream_body = [](const beast_http::response_header<>& header) {
      return header.result_int() >= 200 && header.result_int() < 300;
    };
    options.body_sink = [&output](std::string_view piece) { return output->write(piece); };
    options.classifiers.push_back(output_rule(*output));
  }
  options.classifiers.insert(options.classifiers.end(), plan.classifiers.begin(), plan.classifiers.end());

  if (plan.verbose) print_request(plan);

  asio::signal_set signals(strand, SIGINT, SIGTERM);
  asio::cancellation_signal cancel;
  std::optional<http::result> result;
  std::exception_ptr internal_error;
  int interrupted_by = 0;

  try {
    // Bound to the strand too, so the operation runs on it whichever of its
    // executor and the handler's the engine takes its strand from.
    client->async_send(plan.url, plan.request, options,
                       asio::bind_cancellation_slot(
                           cancel.slot(), asio::bind_executor(strand, [&](std::exception_ptr e, http::result r) {
                             internal_error = std::move(e);
                             result = std::move(r);
                             signals.cancel();
                             progress.stop();
                           })));
  } catch (const std::invalid_argument& error) {
    throw usage_error(error.what()); // refused before anything was sent
  }

  std::function<void(const boost::system::error_code&, int)> on_signal = [&](const boost::system::error_code& error,
                                                                              int signal) {
    if (error) return;
    if (interrupted_by == 0) {
      interrupted_by = signal;
      progress.clear();
      if (plan.verbose) std::fprintf(stderr, "* %s: cancelling\n", std::string{signal_name(signal)}.c_str());
      cancel.emit(asio::cancellation_type::terminal);
      signals.async_wait(on_signal);
      return;
    }
    // A second signal: the user will not wait for the cancellation to finish.
    if (output) output->discard();
    std::_Exit(exit_status::cancelled);
  };
  signals.async_wait(on_signal);
  progress.start();
  io.run();
  // The signal set stays registered while the body is written: a Ctrl-C now
  // is held back for the few milliseconds that takes rather than killing the
  // program between writing the temporary file and renaming it.

  if (internal_error) {
    try {
      std::rethrow_exception(internal_error);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "coretry fetch: internal error: %s\n", error.what());
    } catch (...) {
      std::fprintf(stderr, "coretry fetch: internal error\n");
    }
    return exit_status::failure;
  }

  const http::response* response = result->value && result->value->res ? &*result->value->res : nullptr;
  if (plan.verbose && result->value) print_redirects(result->value->redirects);
  if (plan.verbose && response) print_response(*response);

  int status = exit_status::for_stop(result->reason);
  // A redirect that is the answer (not followed) is shown as curl shows it:
  // its body, as a 2xx body is; the exit status says what it is.
  const bool unfollowed_redirect = !result->succeeded() && response && response->result_int() >= 300 &&
                                   response->result_int() < 400 && !result->value->error &&
                                   result->last_error.category() != http::redirect_error_category() &&
                                   result->reason == stop_reason::rejected;
  if (unfollowed_redirect) {
    status = exit_status::redirect_not_followed;
    std::string line = "HTTP " + std::to_string(response->result_int()) + " " +
                       printable_utf8(response->reason(), 60);
    const auto location = response->find(beast_http::field::location);
    if (location != response->end()) {
      line += " to " + printable_utf8(redact_url(location->value()), 512);
      line += plan.redirects.follow ? " (not a redirect -L follows)" : " (not followed: -L follows redirects)";
    } else {
      line += " without a Location";
    }
    try {
      if (output) {
        if (output->write(response->body())) throw std::runtime_error("cannot write '" + output->target() + "': " + output->failure());
        output->commit();
      } else if (!plan.json && !write_stdout(response->body())) {
        throw std::runtime_error("cannot write to stdout");
      }
    } catch (const std::exception& error) {
      std::fprintf(stderr, "coretry fetch: %s\n", error.what());
      status = exit_status::failure;
    }
    if (!plan.json) std::fprintf(stderr, "coretry fetch: %s\n", line.c_str());
  } else if (result->succeeded()) {
    try {
      if (output) output->commit();
      else if (!plan.json && !write_stdout(response->body())) throw std::runtime_error("cannot write to stdout");
    } catch (const std::exception& error) {
      std::fprintf(stderr, "coretry fetch: %s\n", error.what());
      status = exit_status::failure;
    }
  } else {
    std::string line =
        describe_failure(*result, details, interrupted_by ? signal_name(interrupted_by) : std::string_view{});
    // The last attempt's own transport error: what the output or the
    // memory limit refused.
    const boost::system::error_code last_error = result->value ? result->value->error : boost::system::error_code{};
    if (last_error == output_error::too_large) {
      line += "; --max-filesize is " + std::to_string(*plan.max_filesize) + " bytes";
    } else if (last_error == output_error::write_failed && output) {
      line += "; cannot write '" + output->target() + "': " + output->failure();
      status = exit_status::failure;
    } else if (last_error == beast_http::error::body_limit && !output) {
      line += "; without -o the body is held in memory, at most " + std::to_string(plan.client.body_limit) +
              " bytes (--stdout-limit" + (plan.max_filesize ? ", --max-filesize" : "") + "): use -o FILE for more";
    }
    if (result->value && !result->value->proxy.empty()) line += proxy_failure(*result->value);
    if (result->last_error.category() == http::redirect_error_category() && result->value)
      line += "; " + result->value->problem;
    else if (result->value && !result->value->redirects.empty())
      line += "; after " + std::to_string(result->value->redirects.size()) + " redirect(s), the last to " +
              printable_utf8(result->value->redirects.back().target, 512);
    if (output) output->discard();
    std::fprintf(stderr, "coretry fetch: %s\n", line.c_str());
  }

  if (plan.json && !write_stdout(boost::json::serialize(outcome_json(plan, *result, details, output ? &*output : nullptr, status, interrupted_by)) + "\n")) {
    std::fprintf(stderr, "coretry fetch: cannot write to stdout\n");
    if (status == exit_status::success) status = exit_status::failure;
  }
  return status;
}

} // namespace coretry::cli
