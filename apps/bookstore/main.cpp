// coretry-bookstore: GET /books/{id} answered by calling a pricing service
// through coretry's client, with deadline propagation, one retry owner
// across layers, a shared retry budget and retry gate, and /metrics. See
// bookstore.hpp for the headers it speaks.

#include "bookstore/bookstore.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/system/system_error.hpp>

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  using std::chrono::milliseconds;
  coretry::bookstore::options opts;
  std::string listen = opts.listen;
  std::string pricing;
  std::string budget = "on", gate = "on", coordination = "on", jitter = "full", concurrency_limit = "adaptive",
              throttle_first_attempts = "off";
  unsigned threads = 2;
  unsigned max_attempts = 3;
  std::string hedge_after;
  unsigned max_hedges = 0;
  std::string attempt_timeout = "250";
  long long attempt_floor = 10, attempt_ceiling = 0;
  double attempt_margin = 1.5;
  long long min_attempt = 100, completion_reserve = 50, backoff_initial = 100,
            backoff_max = 1000, max_deadline = 1000, reserve = 10, grace = 1000, gate_max_hold = 100,
            gate_probe_interval = 100;
  std::size_t max_connections = 64;
  long long header_timeout = opts.limits.header_timeout.count(), keep_alive_timeout = opts.limits.keep_alive_timeout.count(),
            send_timeout = opts.limits.send_timeout.count();
  std::size_t max_clients = opts.max_clients;
  std::string shared_state, shared_state_prefix = opts.shared_state_prefix, shared_state_password_file;
  coretry::http::tls_files shared_state_tls;
  long long reconcile_period = opts.reconcile_period.count();

  CLI::App app{"coretry-bookstore - GET /books/{id}, priced by a dependency called through coretry\n\n"
               "Deadline header x-coretry-deadline-ms (remaining milliseconds) is clamped to --max-deadline,\n"
               "less --reserve, and propagated per attempt. With coordination on, requests with\n"
               "x-coretry-attempt > 1 or x-coretry-retries: upstream get a single downstream attempt, and\n"
               "outgoing requests carry both headers.\n\n"
               "Limits on each request: header 8 KiB (else 431), body 64 KiB (else 413), a chunk-size line or\n"
               "trailer 16 KiB (else 413), malformed 400; the header within --header-timeout, silence between\n"
               "requests up to --keep-alive-timeout, each response out of the socket within --send-timeout\n"
               "(and no next request read before), at most --max-clients connections (at the cap the longest\n"
               "idle kept-alive connection is closed for a new one; with none idle, more wait in the backlog).\n\n"
               "With --gate on, one retry gate for pricing closes when more than about 60% of at least 100\n"
               "results in 10 s fail; it then lets one retry through per 100 ms, faster as they succeed, until\n"
               "it opens again. A retry waits for its slot at most --gate-max-hold; a call the gate stops is\n"
               "answered 503, with Retry-After (the probe interval rounded up to whole seconds) while the gate\n"
               "is not open.\n\n"
               "With --shared-state redis://[[USER][:PASSWORD]@]HOST[:PORT][/DB] (rediss:// over TLS), the budget and\n"
               "the gate of pricing are shared with every bookstore naming the same Redis and --shared-state-prefix:\n"
               "each keeps local state and exchanges with Redis every --reconcile-period, never on a request's path.\n"
               "While Redis is unreachable, slow or refusing, each falls back to its own budget and gate.\n"
               "AUTH's user and password (percent-encoded) may be in the URL, where ps shows them, or outside it:\n"
               "the user from the URL (USER@) or CORETRY_REDIS_USERNAME, the password from\n"
               "--shared-state-password-file or else CORETRY_REDIS_PASSWORD. When the URL has a password too,\n"
               "the URL's password wins (with the URL's user, or none: the default user). A user with no password\n"
               "from anywhere is refused. No password is ever printed.\n\n"
               "Exit status: 0 after SIGTERM/SIGINT, 2 bad command line."};
  app.add_option("--listen", listen, "IP:PORT to listen on (port 0: any free port)")->capture_default_str();
  app.add_option("--pricing", pricing, "pricing URL; {id} is replaced by the book id")->required();
  std::string pricing_ca_file;
  app.add_option("--pricing-cacert", pricing_ca_file,
                 "https:// pricing: PEM CA certificates trusted besides the system's store");
  app.add_option("--threads", threads, "threads running the io_context")->capture_default_str()->check(CLI::Range(1u, 256u));
  app.add_option("--budget", budget, "shared retry budget (token bucket, 20 + 10%) on or off")
      ->capture_default_str()->check(CLI::IsMember({"on", "off"}));
  app.add_option("--gate", gate,
                 "shared retry gate on or off: while pricing mostly fails, retries pass only as probes")
      ->capture_default_str()->check(CLI::IsMember({"on", "off"}));
  app.add_option("--throttle-first-attempts", throttle_first_attempts,
                 "with --gate on: reject first attempts locally with the gate's probability (client-side throttling)")
      ->capture_default_str()->check(CLI::IsMember({"on", "off"}));
  app.add_option("--concurrency-limit", concurrency_limit,
                 "pricing's attempts in flight: adaptive, a fixed number of permits, or off; a call with no "
                 "permit is answered 503 at once")
      ->capture_default_str();
  app.add_option("--gate-probe-interval", gate_probe_interval, "ms between the retries a closed gate lets through")
      ->capture_default_str()->check(CLI::Range(1ll, 3600000ll));
  app.add_option("--gate-max-hold", gate_max_hold,
                 "ms a retry may wait for its slot; one whose slot is later is stopped (503)")
      ->capture_default_str()->check(CLI::Range(1ll, 3600000ll));
  app.add_option("--shared-state", shared_state,
                 "redis://[[USER][:PASSWORD]@]HOST[:PORT][/DB]: share pricing's budget and gate through Redis");
  app.add_option("--shared-state-password-file", shared_state_password_file,
                 "file holding AUTH's password (instead of CORETRY_REDIS_PASSWORD; a password in the URL wins)");
  app.add_option("--shared-state-cacert", shared_state_tls.ca_file,
                 "rediss://: PEM CA certificates trusted besides the system's store");
  app.add_option("--shared-state-cert", shared_state_tls.cert_file,
                 "rediss://: PEM client certificate, for a Redis that asks for one");
  app.add_option("--shared-state-key", shared_state_tls.key_file, "rediss://: the client certificate's PEM key");
  app.add_option("--shared-state-prefix", shared_state_prefix, "first part of the shared keys (PREFIX:{pricing}:...)")
      ->capture_default_str();
  app.add_option("--reconcile-period", reconcile_period, "ms between two exchanges with Redis")
      ->capture_default_str()->check(CLI::Range(1ll, 60000ll));
  app.add_option("--coordination", coordination, "honour and send the attempt-count and retry-owner headers")
      ->capture_default_str()->check(CLI::IsMember({"on", "off"}));
  app.add_option("--max-attempts", max_attempts, "attempts per call, the first included")
      ->capture_default_str()->check(CLI::Range(1u, 100u));
  app.add_option("--attempt-timeout", attempt_timeout,
                 "limit of one complete attempt: ms (250), or a percentile of pricing's recent successful attempts "
                 "(p99.9): then --attempt-margin x that percentile, in [--attempt-floor, --attempt-ceiling], and "
                 "the ceiling until 50 successes in 10 s")
      ->capture_default_str();
  app.add_option("--attempt-margin", attempt_margin, "with a percentile: the limit is this many times it (1 to 100)")
      ->capture_default_str()->check(CLI::Range(1.0, 100.0));
  app.add_option("--attempt-floor", attempt_floor, "with a percentile: ms, the shortest limit")
      ->capture_default_str()->check(CLI::Range(1ll, 3600000ll));
  app.add_option("--attempt-ceiling", attempt_ceiling,
                 "with a percentile: ms, the longest limit; 0: the call's remaining time less its reserve")
      ->capture_default_str()->check(CLI::Range(0ll, 3600000ll));
  auto* hedge_after_option =
      app.add_option("--hedge-after", hedge_after,
                     "send a hedge (a second call to pricing) when an attempt has not answered after this long: "
                     "ms (10, 1 to 60000), or a percentile of pricing's recent successful attempts (p95; no hedge "
                     "until 100 have succeeded, then at least 1 ms and at most the attempt's limit)");
  app.add_option("--max-hedges", max_hedges,
                 "hedges in flight beside the first attempt (default 1 with --hedge-after; needs it)")
      ->check(CLI::Range(1u, coretry::policy::max_hedges_cap))
      ->needs(hedge_after_option);
  app.add_option("--min-attempt", min_attempt, "ms, never start an attempt with less")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--completion-reserve", completion_reserve, "ms kept from the call's deadline to return its result")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--backoff-initial", backoff_initial, "ms, first backoff window")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--backoff-max", backoff_max, "ms, largest backoff window")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--jitter", jitter, "none, full, equal or decorrelated")
      ->capture_default_str()->check(CLI::IsMember({"none", "full", "equal", "decorrelated"}));
  app.add_option("--max-deadline", max_deadline, "ms, the most a caller may ask for (and the default)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--reserve", reserve, "ms kept back from the caller's deadline to answer")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--shutdown-grace", grace, "ms attempts in flight may take at shutdown before they are cancelled")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  std::vector<std::string> pricing_resolve;
  app.add_option("--pricing-resolve", pricing_resolve,
                 "HOST:PORT:ADDR[,ADDR...]: connect to these addresses for pricing's HOST and PORT (IPv6 as [::1]), "
                 "as curl's --resolve; new connections race them, a retry prefers another address, one failing "
                 "5 times in a row is left out for 30 s (longer each time); may be repeated")
      ->allow_extra_args(false);
  std::string pricing_balance{coretry::http::to_string(opts.pricing_balance)};
  app.add_option("--pricing-balance", pricing_balance,
                 "how a call picks among pricing's addresses: least_cost (two drawn at random, the one with the "
                 "lower latency estimate, weighed by calls in flight, serves; a new or returning address starts gently) or "
                 "first_to_connect (a new connection races them in order, any pooled connection serves)")
      ->capture_default_str()->check(CLI::IsMember({"least_cost", "first_to_connect"}));
  app.add_option("--max-connections", max_connections, "connections to the pricing service")
      ->capture_default_str()->check(CLI::Range(std::size_t{1}, std::size_t{10000}));
  const long long longest_timeout = coretry::serving::longest_timeout.count();
  app.add_option("--header-timeout", header_timeout,
                 "ms a client has to send a request's header (from its connection or the request's first byte), "
                 "and again its body; then the connection is closed")
      ->capture_default_str()->check(CLI::Range(1LL, longest_timeout));
  app.add_option("--keep-alive-timeout", keep_alive_timeout, "ms a kept-alive client connection may stay silent between requests")
      ->capture_default_str()->check(CLI::Range(1LL, longest_timeout));
  app.add_option("--send-timeout", send_timeout,
                 "ms a response has to leave the socket (the client taking it) from its first write; then the "
                 "connection is reset. No next request is read before")
      ->capture_default_str()->check(CLI::Range(1LL, longest_timeout));
  app.add_option("--max-clients", max_clients,
                 "client connections open at once; at the cap the longest idle kept-alive one is closed for a new "
                 "one, else more wait in the listen backlog")
      ->capture_default_str()->check(CLI::Range(std::size_t{1}, coretry::bookstore::most_clients));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "coretry-bookstore: %s\n", e.what());
    return 2;
  }

  opts.listen = listen;
  opts.pricing_url = pricing;
  opts.pricing_ca_file = pricing_ca_file;
  opts.budget = budget == "on";
  opts.gate = gate == "on";
  opts.gate_options.probe_interval = milliseconds{gate_probe_interval};
  opts.gate_options.max_hold = milliseconds{gate_max_hold};
  opts.gate_options.throttle_first_attempts = throttle_first_attempts == "on";
  opts.coordination = coordination == "on";
  opts.policy.max_attempts = max_attempts;
  try {
    coretry::bookstore::apply_attempt_timeout(attempt_timeout, opts.policy);
    coretry::bookstore::apply_concurrency_limit(concurrency_limit, opts);
    if (hedge_after_option->count() > 0) {
      opts.policy.hedging.max_hedges = max_hedges > 0 ? max_hedges : 1;
      coretry::bookstore::apply_hedge_after(hedge_after, opts.policy);
    }
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "coretry-bookstore: %s\n", e.what());
    return 2;
  }
  if (opts.policy.observed) {
    opts.policy.observed->margin = attempt_margin;
    opts.policy.observed->floor = milliseconds{attempt_floor};
    opts.policy.observed->ceiling = attempt_ceiling == 0 ? coretry::duration::max() : milliseconds{attempt_ceiling};
  }
  opts.policy.min_attempt_allowance = milliseconds{min_attempt};
  opts.policy.completion_reserve = milliseconds{completion_reserve};
  opts.policy.backoff.initial_window = milliseconds{backoff_initial};
  opts.policy.backoff.max_window = milliseconds{backoff_max};
  opts.policy.backoff.jitter = *coretry::parse_jitter_kind(jitter);
  opts.max_deadline = milliseconds{max_deadline};
  opts.reserve = milliseconds{reserve};
  opts.shutdown_grace = milliseconds{grace};
  opts.max_connections = max_connections;
  opts.pricing_resolve = pricing_resolve;
  opts.pricing_balance = *coretry::http::parse_balance_mode(pricing_balance);
  opts.limits.header_timeout = milliseconds{header_timeout};
  opts.limits.keep_alive_timeout = milliseconds{keep_alive_timeout};
  opts.limits.send_timeout = milliseconds{send_timeout};
  opts.max_clients = max_clients;
  opts.shared_state = shared_state;
  opts.shared_state_prefix = shared_state_prefix;
  opts.reconcile_period = milliseconds{reconcile_period};
  opts.shared_state_password_file = shared_state_password_file;
  opts.shared_state_tls = shared_state_tls;
  opts.on_shared_state_problem = [](std::string_view problem) {
    if (problem.empty())
      std::fprintf(stderr, "coretry-bookstore: shared state: in use\n");
    else
      std::fprintf(stderr, "coretry-bookstore: shared state: %.*s; budget and gate are local until Redis answers\n",
                   static_cast<int>(problem.size()), problem.data());
  };

  try {
    coretry::bookstore::read_shared_state_credentials(opts);
    coretry::bookstore::validate(opts);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "coretry-bookstore: %s\n", e.what());
    return 2;
  }

  try {
    boost::asio::io_context io{static_cast<int>(threads)};
    std::optional<coretry::bookstore::server> server;
    server.emplace(io, opts);
    boost::asio::signal_set signals{io, SIGINT, SIGTERM};
    signals.async_wait([&](const boost::system::error_code& error, int) {
      if (error) return;
      std::fprintf(stderr, "coretry-bookstore: shutting down\n");
      server->shutdown([] { std::fprintf(stderr, "coretry-bookstore: every connection closed\n"); });
    });
    std::printf("listening on %s\n", server->base_url().c_str());
    std::fflush(stdout);
    std::vector<std::thread> pool;
    for (unsigned i = 1; i < threads; ++i) pool.emplace_back([&io] { io.run(); });
    io.run(); // returns once the server has closed everything
    for (auto& t : pool) t.join();
    server.reset();
    return 0;
  } catch (const boost::system::system_error& e) { // cannot bind, out of descriptors, ...
    std::fprintf(stderr, "coretry-bookstore: cannot serve on %s: %s\n", listen.c_str(), e.code().message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coretry-bookstore: %s\n", e.what());
    return 1;
  }
}
