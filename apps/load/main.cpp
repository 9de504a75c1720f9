// coretry-load: an open-loop HTTP/1.1 load generator. Requests arrive as a
// Poisson process at each phase's rate whatever the answers do (wrk and the
// like are closed-loop: a slow server slows their requests down, hiding the
// overload they mean to show). Reports, per window, what was sent, answered
// (200, 503, 504, other), timed out, failed, and not sent for want of a
// connection; goodput and the 200s' latency.

#include "load/load_generator.hpp"
#include "load/load_options.hpp"
#include "load/load_report.hpp"

#include <CLI/CLI.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <random>
#include <string>

#include <sys/resource.h>

namespace {

constexpr int exit_success = 0;
constexpr int exit_failure = 1;
constexpr int exit_usage = 2;

constexpr const char* description =
    "coretry-load - an open-loop HTTP/1.1 load generator\n\n"
    "Requests arrive at random (a Poisson process, seeded) at each phase's rate, whatever the\n"
    "answers do. A request due while no kept-alive connection is free opens a new one, up to\n"
    "--connections; beyond that it is counted as not sent, never delayed. Each request has\n"
    "--timeout from its arrival, connecting included; its latency is measured from its arrival.\n"
    "Every --window prints what happened in it, then the whole run.";

constexpr const char* footer = R"(EXIT STATUS
  0    the run finished (whatever the server answered)
  1    the host could not be resolved
  2    bad command line

EXAMPLES
  coretry-load http://127.0.0.1:8080/books/1 --rate 320 --duration 10
  coretry-load http://127.0.0.1:8080/books/1 --phase 1280:15 --phase 160:8 --timeout 1000 --window 500 --json)";

// Room for every connection and a few descriptors more; raises the soft
// limit when the hard one allows.
void ensure_descriptors(std::size_t connections) {
  const rlim_t needed = static_cast<rlim_t>(connections) + 64;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= needed) return;
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < needed)
    throw coretry::load::usage_error("--connections: " + std::to_string(connections) + " needs " +
                                     std::to_string(needed) + " descriptors, and the limit is " +
                                     std::to_string(limit.rlim_max));
  limit.rlim_cur = needed;
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

std::uint64_t fresh_seed() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device() ^
         static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  return text;
}

} // namespace

int main(int argc, char** argv) {
  coretry::load::arguments args;
  CLI::App app{description, "coretry-load"};
  app.footer(footer);
  const auto text = [&app](const std::string& name, std::optional<std::string>& into, const std::string& help,
                           const std::string& type) {
    return app.add_option_function<std::string>(name, [&into](const std::string& value) { into = value; }, help)
        ->type_name(type);
  };
  app.add_option("URL", args.url, "http:// URL to request (GET), at most 2048 characters")->required();
  app.add_option("--phase", args.phases,
                 "RATE:SECONDS, repeatable, in order: RATE requests/s\n(0 to 100000) for SECONDS (up to 3600)")
      ->type_name("RATE:SECONDS")
      ->allow_extra_args(false);
  text("--rate", args.rate, "one phase: requests/s (with --duration)", "RATE");
  text("--duration", args.duration, "one phase: seconds (with --rate)", "SECONDS");
  text("--seed", args.seed, "seed of the arrivals (default: fresh, printed)", "N");
  text("--connections", args.connections, "connections open at most, 1 to 10000 (default 256)", "N");
  text("--timeout", args.timeout, "ms a request may take from its arrival, 1 to\n600000 (default 1000)", "MS");
  text("--window", args.window, "ms per report line, 10 to 60000 (default 1000)", "MS");
  app.add_flag("--deadline-header", args.deadline_header,
               "send x-coretry-deadline-ms: what is left of the\nrequest's timeout");
  app.add_flag("--json", args.json, "JSON lines instead of a table");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == 0) return app.exit(error);
    std::fprintf(stderr, "coretry-load: %s (see coretry-load --help)\n", one_line(error.what()).c_str());
    return exit_usage;
  }

  coretry::load::plan plan;
  try {
    plan = coretry::load::make_plan(args, fresh_seed());
    ensure_descriptors(plan.connections);
  } catch (const coretry::load::usage_error& error) {
    std::fprintf(stderr, "coretry-load: %s\n", one_line(error.what()).c_str());
    return exit_usage;
  }

  boost::asio::io_context io{1};
  // SIGINT or SIGTERM: no more requests; those sent end within their timeout.
  bool stop = false;
  boost::asio::signal_set signals{io, SIGINT, SIGTERM};
  signals.async_wait([&stop](const boost::system::error_code& error, int) {
    if (!error) stop = true;
  });
  if (!plan.json) std::fputs(coretry::load::table_heading().c_str(), stdout);
  const auto print = [&plan](const coretry::load::window_report& window) {
    const std::string line = plan.json ? coretry::load::json_line(window) + "\n" : coretry::load::table_row(window);
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  };
  try {
    const auto summary = coretry::load::run_load(io, plan, print, [&stop] { return stop; });
    const std::string last =
        plan.json ? coretry::load::json_summary(summary) + "\n" : coretry::load::table_summary(summary);
    std::fputs(last.c_str(), stdout);
  } catch (const boost::system::system_error& error) {
    std::fprintf(stderr, "coretry-load: %s: %s\n", plan.host.c_str(), error.what());
    return exit_failure;
  }
  return exit_success;
}
