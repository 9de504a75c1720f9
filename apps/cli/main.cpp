// coretry: the command-line program. `fetch` sends one HTTP request under a
// retry policy with curl's habits, `faults` runs the fault-injection server,
// `demo` replays the specification's failures against it.

#include "cli/command_line.hpp"
#include "cli/demo.hpp"
#include "cli/exit_status.hpp"
#include "cli/faults_command.hpp"
#include "cli/fetch.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <memory>
#include <exception>
#include <string>

namespace {

using coretry::cli::exit_status::failure;
using coretry::cli::exit_status::success;
using coretry::cli::exit_status::usage;

constexpr const char* program_description =
    "coretry - HTTP requests that retry without becoming the load that keeps a server down\n\n"
    "Every request runs under one bounded policy: a deadline for the whole operation and for\n"
    "each attempt that reaches the socket, exponential backoff with jitter, a server's\n"
    "Retry-After taken as a minimum (and a stop when it does not fit the deadline), and a\n"
    "retry only when repeating is safe and could change the answer. Every stop says why.";

constexpr const char* program_footer = R"(EXIT STATUS
  0       success (demo: every case behaved as the specification says)
  1       the program could not do its job (an output could not be written;
          demo: a case deviated, and the output names it)
  2       bad command line: a one-line error names the problem; nothing was sent
  10-18   fetch stopped without success, one status per stop reason
          (see coretry fetch --help)
  19      fetch: the answer is a redirect that was not followed

EXAMPLES
  coretry demo                                  see the policy at work, offline
  coretry fetch -v https://example.com/         a GET with its retry timeline
  coretry faults --listen 127.0.0.1:8080        a server that fails on request

Run 'coretry SUBCOMMAND --help' for each subcommand's options.)";

constexpr const char* fetch_description =
    "coretry fetch - send one HTTP request and retry it under a bounded policy\n\n"
    "Writes the response body to stdout (or -o FILE) when the request succeeds. Otherwise\n"
    "prints one line to stderr: the stop reason, the attempts, the time taken and the last\n"
    "status or failure category. GET, HEAD, OPTIONS, TRACE, PUT and DELETE are retried after\n"
    "transient failures; POST and PATCH only with --idempotency-key, or when the attempt\n"
    "provably never reached the server. 2xx succeeds; 408, 429, 500, 502, 503 and 504 and\n"
    "transport failures are transient; other statuses are permanent (rejected).";

constexpr const char* fetch_footer = R"(RETRY POLICY
  The whole operation has --max-time; each attempt gets min(--attempt-timeout, what
  remains minus a completion reserve) and is cancelled when that runs out. An attempt
  never starts with less than a minimum allowance. Waits between attempts are drawn
  from exponential windows (doubling from --backoff-initial up to --backoff-cap) with
  --jitter. A Retry-After on 429, 503 or 413 is a minimum: the wait is the larger of it
  and the local backoff, plus up to 100 ms of spread; when that does not fit the deadline
  the request stops at once (server_delay_too_long) instead of shortening it.
  Derived values, chosen so that any valid command line gives a usable policy:
    completion reserve  = min(50 ms, max-time / 10)
    attempt timeout     = --attempt-timeout, else min(10 s, max-time)
    minimum allowance   = min(100 ms, attempt timeout, max-time - reserve)
    backoff             = given one of --backoff-initial and --backoff-cap, the other
                          follows it (initial <= cap); giving initial > cap is an error
  Durations are seconds, decimals allowed (0.25), from 0 to 86400 (one day).

OUTPUT
  --json prints one JSON object on stdout instead of the body, success or not:
  stop_reason, succeeded, exit_status, attempts, status (last HTTP status or null),
  category, elapsed_ms, total_backoff_ms, error, problem, body_bytes, body_start,
  content_type, method, url, idempotency_key, interrupted_by, policy, redirects,
  redirect_error, and attempt_log:
  per attempt status, category, verdict, delivery, wait_before_ms, wait_source
  (none/local/server), start_ms, end_ms, allowance_ms, server_delay_ms, retry_after,
  error, problem, reached, reused_connection.
  -v prints the request and a timeline to stderr as it happens. The value of a header
  whose name contains key, token, secret, password, auth, session, cookie, signature or
  credential (Idempotency-Key excepted) is never printed, nor, in a URL, user
  information or the value of a query parameter named like those or pwd, pass, jwt, sig.
  On a terminal, a status line on stderr shows the elapsed time of a slow request.
  -o streams each attempt's 2xx body, as it arrives, into a temporary file (beside FILE
  when that directory is writable, else in $TMPDIR or /tmp), so any size works; FILE is
  touched only on success, and is left as it was on failure or interruption:
    a new FILE is the temporary file renamed into place, mode 0666 & ~umask;
    an existing file is overwritten in place: it keeps its inode, mode, owner and hard
    links, and a symlink stays, its target written;
    a FIFO or device (-o /dev/null, /dev/stdout on a pipe) is written directly as the
    bytes arrive: once bytes went there, a failed attempt is NOT retried (stop
    rejected, category output_already_written).
  --max-filesize bounds the body (with -o or on stdout): a larger one stops the request,
  rejected (category max_filesize), without retrying.
  Without -o the body is held in memory until the request succeeds, at most
  --stdout-limit bytes (default 8M); a larger body is rejected (response_too_large).

REDIRECTS
  Without -L a redirect is the answer: its body is written as a 2xx body is, one line
  on stderr names its status and Location, and the exit status is 19. With -L, 301,
  302, 303, 307 and 308 with a Location are followed, at most --max-redirs times
  (default 50): 307 and 308 keep the method, the body and the idempotency key; 303,
  and 301 and 302 after a POST, become a GET without a body; a relative Location is
  resolved against the URL that answered, whose fragment it keeps. --max-time and
  --max-attempts bound the whole chain. Credentials (Authorization, Cookie,
  Proxy-Authorization, the URL's user) go to the first URL's origin only, unless
  --location-trusted; https:// is never redirected to http://. Too many redirects, an
  invalid Location or a downgrade stops as rejected (10). -v prints a '* redirect:'
  line per hop; --json adds redirects (method, url, status, location, target,
  address per hop) and redirect_error.

SIGNALS
  SIGINT (Ctrl-C) or SIGTERM cancels the request in flight: stop reason cancelled,
  exit status 15. A second signal exits at once.

EXIT STATUS
  0    succeeded
  1    the body could not be written (-o or stdout)
  2    bad command line (bad URL, header, duration, count, jitter, unreadable -d @FILE
       or --cacert, unusable -o): nothing was sent
  10   rejected: a failure another attempt cannot fix (4xx, a permanent rule, TLS
       verification, an invalid response)
  11   attempts_exhausted: the last allowed attempt failed transiently
  12   deadline_exhausted: too little of --max-time was left for a useful attempt
  13   server_delay_too_long: the server's Retry-After does not fit --max-time
  14   budget_exhausted: no retry budget left (never from one coretry call: the budget
       is shared by many operations in a long-lived process)
  15   cancelled: interrupted by SIGINT or SIGTERM
  16   outcome_unknown: a request that is not safe to repeat timed out after it was
       sent; it may have taken effect, so it was not repeated
  17   dependency_unhealthy: a retry gate found the server unhealthy (never from one
       coretry call: the gate is shared by many operations in a long-lived process)
  18   concurrency_limited: no permit for an attempt under a concurrency limit (never
       from one coretry call: the limit is shared by many operations in a long-lived
       process)
  19   the answer is a redirect (3xx) that was not followed: no -L, or one -L does not
       follow (300, 304, 305, 306, or no Location); its body was written

EXAMPLES
  coretry fetch https://api.example.com/books/42
  coretry fetch -v --max-time 5 --attempt-timeout 0.5 https://api.example.com/books/42
  coretry fetch --retry 4 --jitter equal -o book.json https://api.example.com/books/42
  coretry fetch -X POST -d @order.json -H 'Content-Type: application/json' \
      --idempotency-key auto https://api.example.com/orders
  coretry fetch --json --out-of-credits-header x-api-remaining-credits=0 \
      --permanent-5xx-body 'website returned HTTP 4[0-9][0-9]' https://api.example.com/scrape)";

constexpr const char* faults_description =
    "coretry faults - an HTTP server that fails on request, for testing clients\n\n"
    "Each request's path says how to answer it:\n"
    "  /status/CODE?OPTIONS       one scripted response\n"
    "  /seq/NAME?steps=S1,S2,...  the k-th request to NAME gets step k (the last repeats)\n"
    "  /echo                      the request as JSON\n"
    "  /capacity/ANYTHING         waits in a FIFO queue for one of --workers workers, holds it\n"
    "                             --service-ms (on a timer), then 200; abandoned requests are\n"
    "                             still worked off (wasted work)\n"
    "  /_capacity[?workers=N]     the capacity route's counters as JSON (sets the workers first)\n"
    "  /_log, /_reset             the request log as JSON (the last --log-limit requests);\n"
    "                             forget the log and sequences, zero the capacity counters\n"
    "A step is [CODE] followed by ;OPTION, with options retry-after=V, retry-after-date=[+-]S,\n"
    "header=NAME:VALUE, body=TEXT, delay=MS, drip=N:MS, hang-after-headers, close, reset\n"
    "(percent-encode ',' ';' and spaces inside values).\n\n"
    "Limits on each request: header 8 KiB (else 431), body 1 MiB (else 413), a chunk-size line or\n"
    "trailer 16 KiB (else 413), malformed 400; a header not received within --header-timeout or a\n"
    "connection silent past --keep-alive-timeout is closed, one whose response has not left the\n"
    "socket within --send-timeout is reset; at most --max-clients connections (at the cap the longest\n"
    "idle kept-alive one is closed for a new one, else more wait in the listen backlog); /seq remembers the 10000 most recently used names. /_log counts\n"
    "what was refused and forgotten.";

constexpr const char* faults_footer = R"(Prints 'listening on URL' as its first line once it accepts connections (after writing
--ca-out), and serves until SIGINT or SIGTERM.

EXIT STATUS
  0    stopped by SIGINT or SIGTERM
  1    could not listen (address in use, ...) or write --ca-out
  2    bad command line

EXAMPLES
  coretry faults --listen 127.0.0.1:8080
  coretry fetch -v 'http://127.0.0.1:8080/seq/a?steps=503;retry-after=1,200'
  coretry faults --tls --ca-out /tmp/ca.pem --listen 127.0.0.1:8443
  coretry faults --listen 127.0.0.1:8081 --workers 8 --service-ms 25 --max-clients 20000
  curl 'http://127.0.0.1:8081/_capacity?workers=4')";

constexpr const char* demo_description =
    "coretry demo - the specification's failures, replayed and measured now\n\n"
    "Starts the fault server in this process on a free loopback port and runs the client\n"
    "against it: seven failures from a public API (401, 400, 404, a scraper's 503, a POST\n"
    "timeout, then 429 and 502 that are retried and succeed), a 200 whose body is not what\n"
    "was asked for, and the book-detail read with its timeline (two hangs, success near\n"
    "890 ms; a 503 with Retry-After: 1 that stops at once). Takes about 5 seconds.";

constexpr const char* demo_footer = R"(EXIT STATUS
  0    every case behaved as the specification says
  1    a case deviated (the output names it)

EXAMPLE
  coretry demo)";

/// CLI11's layout, with a long description (a man page's NAME and
/// DESCRIPTION) on each command's own help page, while the list of
/// subcommands keeps their one-line summaries.
class man_page_formatter final : public CLI::Formatter {
public:
  void describe(const CLI::App* app, std::string text) { long_descriptions_[app] = std::move(text); }

  std::string make_description(const CLI::App* app) const override {
    const auto found = long_descriptions_.find(app);
    if (found == long_descriptions_.end()) return CLI::Formatter::make_description(app);
    return found->second + "\n\n";
  }

private:
  std::map<const CLI::App*, std::string> long_descriptions_;
};

// Stores an option's text only when given, so "not given" stays distinct from any value.
CLI::Option* text_option(CLI::App& app, const std::string& names, std::optional<std::string>& into,
                         const std::string& help, const std::string& type, const std::string& group) {
  return app
      .add_option_function<std::string>(
          names, [&into](const std::string& value) { into = value; }, help)
      ->type_name(type)
      ->group(group);
}

// A duration option, typed in seconds (command_line's parse_seconds reads it).
CLI::Option* seconds_option(CLI::App& app, const std::string& names, std::optional<std::string>& into,
                            const std::string& help, const std::string& group) {
  return text_option(app, names, into, help, "SECONDS", group);
}

void add_fetch(CLI::App& app, man_page_formatter& formatter, coretry::cli::fetch_arguments& args) {
  CLI::App& fetch = *app.add_subcommand("fetch", "send one HTTP request with retries (curl-like)");
  formatter.describe(&fetch, fetch_description);
  fetch.footer(fetch_footer);
  fetch.add_option("URL", args.url, "http:// or https:// URL to request")->required()->type_name("");

  const std::string request = "Request";
  text_option(fetch, "-X,--request", args.method, "method (default GET, or POST with -d)", "METHOD", request);
  fetch.add_option("-H,--header", args.headers, "add a header field (repeatable)")
      ->allow_extra_args(false)
      ->type_name("'NAME: VALUE'")
      ->group(request);
  fetch.add_option("-d,--data", args.data,
                   "send DATA as the body, or the contents of FILE\n"
                   "with @FILE (@- for stdin), verbatim; repeated\n"
                   "values are joined with '&'. Implies POST and\n"
                   "Content-Type: application/x-www-form-urlencoded\n"
                   "unless -X and -H say otherwise")
      ->allow_extra_args(false)
      ->type_name("DATA|@FILE")
      ->group(request);
  text_option(fetch, "--idempotency-key", args.idempotency_key,
              "send Idempotency-Key: KEY (the same on every\n"
              "attempt), making POST and PATCH retryable; 'auto'\n"
              "generates a random UUID",
              "auto|KEY", request);
  text_option(fetch, "--cacert", args.cacert, "also trust the CA certificates in FILE (PEM)", "FILE", request);
  text_option(fetch, "--cert", args.cert,
              "client certificate (PEM), sent when the server asks;\nits key too unless --key is given", "FILE",
              request);
  text_option(fetch, "--key", args.key, "the client certificate's private key (PEM)", "FILE", request);
  text_option(fetch, "--key-password-file", args.key_password_file,
              "the key's password: the first line of FILE", "FILE", request);
  text_option(fetch, "--key-password-env", args.key_password_env,
              "the key's password: the value of the environment\nvariable NAME", "NAME", request);
  text_option(fetch, "-x,--proxy", args.proxy,
              "send through the HTTP proxy\n[http://][USER:PASS@]HOST[:PORT] (port 1080 if\n"
              "not given); https:// URLs go through a CONNECT\n"
              "tunnel. Without -x: https_proxy, HTTPS_PROXY,\n"
              "http_proxy (lower case only), all_proxy,\n"
              "ALL_PROXY as curl reads them; -x '' turns them off",
              "URL", request);
  fetch.add_option("--resolve", args.resolve,
                   "connect to these addresses for HOST and PORT\n"
                   "instead of looking HOST up (IPv6 as [::1]); new\n"
                   "connections race them, a retry prefers another\n"
                   "(repeatable)")
      ->allow_extra_args(false)
      ->type_name("HOST:PORT:ADDR[,ADDR...]")
      ->group(request);
  text_option(fetch, "--balance", args.balance,
              "how a request picks among a name's addresses:\n"
              "least_cost (default; two drawn at random, the\n"
              "lower latency estimate, weighed by requests in\n"
              "flight, serves) or first_to_connect (a new\n"
              "connection races them in order); -v names the\n"
              "address",
              "MODE", request);
  fetch.add_flag("-L,--location", args.location,
                 "follow redirects (301, 302, 303, 307, 308 with a\n"
                 "Location), inside --max-time and --max-attempts;\n"
                 "credentials go to the first origin only, and an\n"
                 "https:// URL is never redirected to http://")
      ->group(request);
  text_option(fetch, "--max-redirs", args.max_redirs, "redirects followed at most with -L, 0-1000\n(default 50)",
              "N", request);
  fetch.add_flag("--location-trusted", args.location_trusted,
                 "-L, and send credentials (-H Authorization,\nCookie, the URL's user) to every host")
      ->group(request);
  text_option(fetch, "--noproxy", args.noproxy,
              "hosts reached directly: comma-separated names\n"
              "(a domain covers its subdomains), addresses,\n"
              "networks (10.0.0.0/8), or '*'; overrides\n"
              "no_proxy/NO_PROXY",
              "LIST", request);

  const std::string output = "Output";
  text_option(fetch, "-o,--output", args.output,
              "write the body to FILE instead of stdout (- is\nstdout), streamed, put in place only on\n"
              "success; a FIFO or device is written as bytes\narrive, and then not retried (see OUTPUT)",
              "FILE", output);
  text_option(fetch, "--max-filesize", args.max_filesize,
              "refuse a body larger than BYTES (k, M, G:\nKiB, MiB, GiB): permanent, not retried",
              "BYTES", output);
  text_option(fetch, "--stdout-limit", args.stdout_limit,
              "without -o, the body is held in memory until\nsuccess: at most BYTES (default 8M, at most 1G)",
              "BYTES", output);
  fetch.add_flag("-v,--verbose", args.verbose, "print the request and the retry timeline to\nstderr as it happens")
      ->group(output);
  fetch.add_flag("--json", args.json, "print one JSON object describing the outcome\non stdout instead of the body")
      ->group(output);
  fetch.add_flag("--no-progress", args.no_progress, "never show the status line on a terminal")->group(output);

  const std::string retry = "Retry policy";
  text_option(fetch, "--max-attempts", args.max_attempts, "attempts including the first, 1-1000 (default 3)", "N",
              retry);
  text_option(fetch, "--retry", args.retry, "curl's form: N retries, so N+1 attempts\n(not with --max-attempts)",
              "N", retry);
  seconds_option(fetch, "--max-time", args.max_time, "deadline of the whole operation (default 30)", retry);
  seconds_option(fetch, "--backoff-initial", args.backoff_initial, "first backoff window (default 0.1)", retry);
  seconds_option(fetch, "--hedge-after", args.hedge_after,
                 "send a hedge (another attempt, on another\nconnection) when an attempt has not answered\n"
                 "after this long; safe requests only, not\nwith -o (default: no hedging)", retry);
  text_option(fetch, "--max-hedges", args.max_hedges,
              "hedges in flight beside the first attempt,\n1-4 (default 1 with --hedge-after)", "N", retry);
  seconds_option(fetch, "--backoff-cap", args.backoff_cap, "largest backoff window (default 1)", retry);
  text_option(fetch, "--jitter", args.jitter,
              "how a wait is drawn from its window (default full):\n"
              "none = the window, full = 0..window, equal = half\n"
              "+ 0..half, decorrelated = initial..3 x previous",
              "none|full|equal|decorrelated", retry);

  const std::string timeouts = "Timeouts";
  seconds_option(fetch, "--attempt-timeout", args.attempt_timeout,
                 "limit of one complete attempt: connection, TLS,\n"
                 "request and the whole response (default 10)", timeouts);
  seconds_option(fetch, "--connect-timeout", args.connect_timeout,
                 "limit of DNS, connect and TLS handshake, inside\nthe attempt's (default 0: none of its own)",
                 timeouts);
  seconds_option(fetch, "--idle-timeout", args.idle_timeout,
                 "longest silence while reading the response\n(default 0: none); the attempt timeout still\n"
                 "cuts a server that drips slowly", timeouts);

  const std::string permanent = "Permanent failures";
  text_option(fetch, "--out-of-credits-header", args.out_of_credits_header,
              "a 429 whose header NAME is exactly VALUE is\n"
              "permanent (out of credits, not too fast)",
              "NAME=VALUE", permanent);
  text_option(fetch, "--permanent-5xx-body", args.permanent_5xx_body,
              "a 5xx whose body matches REGEX (ECMAScript,\n"
              "case-insensitive, '.' stops at a line break) is\n"
              "permanent; a search too costly for a body is no match",
              "REGEX", permanent);
}

void add_faults(CLI::App& app, man_page_formatter& formatter, coretry::cli::faults_arguments& args) {
  CLI::App& faults = *app.add_subcommand("faults", "run the fault-injection HTTP server");
  formatter.describe(&faults, faults_description);
  faults.footer(faults_footer);
  text_option(faults, "--listen", args.listen, "address to serve on; IPv6 as [ADDRESS]:PORT;\nport 0 picks a free one",
              "IP:PORT", "Options")
      ->default_str(coretry::cli::default_listen_address());
  auto* tls = faults.add_flag("--tls", args.tls, "serve HTTPS with a freshly generated test CA");
  text_option(faults, "--tls-client-ca", args.tls_client_ca,
              "require a client certificate issued by a CA in\nFILE (PEM); needs --tls", "FILE", "Options")
      ->needs(tls);
  text_option(faults, "--ca-out", args.ca_out, "write that CA's certificate (PEM) to FILE", "FILE", "Options")
      ->needs(tls);
  text_option(faults, "--log-limit", args.log_limit,
              "requests /_log keeps, the most recent, 0 to\n1000000 (default 10000; 0 keeps none)", "N", "Options");
  seconds_option(faults, "--header-timeout", args.header_timeout,
                 "seconds a client has to send a request's header\n(from connecting or the request's first byte),\n"
                 "and again its body; then the connection is\nclosed (default 10)",
                 "Options");
  seconds_option(faults, "--keep-alive-timeout", args.keep_alive_timeout,
                 "seconds a kept-alive connection may stay silent\nbetween requests (default 30)", "Options");
  seconds_option(faults, "--send-timeout", args.send_timeout,
                 "seconds a response has to leave the socket (the\nclient taking it) from its first write, each\n"
                 "dripped byte alike; then the connection is reset;\nno next request is read before (default 10)",
                 "Options");
  text_option(faults, "--max-clients", args.max_clients,
              "client connections open at once, 1 to 100000; at\nthe cap the longest idle kept-alive one is closed\n"
              "for a new one, else more wait in the listen\nbacklog (default 512)", "N",
              "Options");
  const std::string capacity = "Capacity route (/capacity/ANYTHING)";
  text_option(faults, "--workers", args.workers,
              "workers serving it, 1 to 10000 (default 8);\nchangeable at run time: GET /_capacity?workers=N",
              "N", capacity);
  text_option(faults, "--service-ms", args.service_ms,
              "milliseconds a request holds its worker, on a\ntimer, 0 to 60000 (default 25)", "MS", capacity);
  text_option(faults, "--queue-limit", args.queue_limit,
              "requests waiting for a worker, 0 to 1000000;\nbeyond it 503 at once (default 100000)", "N",
              capacity);
}

// CLI11's messages can span lines; the contract is one line.
std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"", "coretry"};
  // Set before the subcommands are added: they share their parent's formatter.
  const auto formatter = std::make_shared<man_page_formatter>();
  formatter->column_width(36);
  formatter->describe(&app, program_description);
  app.formatter(formatter);
  app.footer(program_footer);
  app.set_version_flag("--version", "coretry " CORETRY_VERSION);
  app.require_subcommand(1);

  coretry::cli::fetch_arguments fetch_args;
  coretry::cli::faults_arguments faults_args;
  add_fetch(app, *formatter, fetch_args);
  add_faults(app, *formatter, faults_args);
  CLI::App& demo = *app.add_subcommand("demo", "replay the specification's failures against an\nin-process fault server");
  formatter->describe(&demo, demo_description);
  demo.footer(demo_footer);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
    const std::string where = app.get_subcommands().empty() ? "coretry" : "coretry " + app.get_subcommands()[0]->get_name();
    std::fprintf(stderr, "%s: %s (see %s --help)\n", where.c_str(), one_line(error.what()).c_str(), where.c_str());
    return usage;
  }

  const CLI::App* chosen = app.get_subcommands().front();
  const std::string where = "coretry " + chosen->get_name();
  try {
    if (chosen->get_name() == "fetch") return coretry::cli::run_fetch(coretry::cli::make_fetch_plan(fetch_args));
    if (chosen->get_name() == "faults") return coretry::cli::run_faults(faults_args);
    return coretry::cli::run_demo();
  } catch (const coretry::cli::usage_error& error) {
    std::fprintf(stderr, "%s: %s\n", where.c_str(), one_line(error.what()).c_str());
    return usage;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: %s\n", where.c_str(), one_line(error.what()).c_str());
    return failure;
  }
  return success;
}
