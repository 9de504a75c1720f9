// herd: many clients fail together and retry through the real coretry engine
// on virtual time. Compares retry strategies (no backoff, exponential, full,
// equal and decorrelated jitter) with the retry budget on and off, in the
// contention model of the AWS "Exponential Backoff and Jitter" study and in
// an outage of a dependency with a capacity. Prints tables, writes CSV and
// charts of arrivals over time (with gnuplot, when it is installed).

#include "herd/herd_options.hpp"
#include "herd/herd_report.hpp"
#include "herd/herd_sim.hpp"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include <unistd.h>

namespace {

constexpr int exit_success = 0;
constexpr int exit_failure = 1;
constexpr int exit_usage = 2;

/// A one-line progress bar on stderr, redrawn at most every 100 ms.
class progress_bar {
public:
  explicit progress_bar(bool enabled) : enabled_(enabled) {}

  void update(std::size_t done, std::size_t total, const std::string& what) {
    if (!enabled_ || total == 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (done != total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr int width = 30;
    const int filled = static_cast<int>(width * done / total);
    std::fprintf(stderr, "\r\x1b[K[%.*s%.*s] %3zu%%  %s", filled, "##############################",
                 width - filled, "..............................", 100 * done / total, what.c_str());
    std::fflush(stderr);
    shown_ = true;
  }
  void clear() {
    if (!shown_) return;
    std::fputs("\r\x1b[K", stderr);
    std::fflush(stderr);
    shown_ = false;
  }

private:
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

std::uint64_t fresh_seed() {
  std::random_device device;
  const auto now = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return ((std::uint64_t{device()} << 32) ^ device() ^ now ^ (std::uint64_t(::getpid()) << 16)) &
         ((std::uint64_t{1} << 53) - 1); // small enough to copy from the output without surprises
}

std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n') c = ' ';
  return text;
}

void render(const std::filesystem::path& dir, const std::string& script, const std::string& image, bool chart) {
  if (!chart) {
    std::printf("chart %s not drawn (--no-chart); render it with: cd %s && gnuplot %s\n", image.c_str(),
                dir.string().c_str(), script.c_str());
    return;
  }
  const auto gnuplot = herd::find_gnuplot();
  if (!gnuplot) {
    std::printf("chart %s skipped: gnuplot is not installed (Debian: apt-get install gnuplot-nox);\n"
                "  the script and its data are written: cd %s && gnuplot %s\n",
                image.c_str(), dir.string().c_str(), script.c_str());
    return;
  }
  const int status = herd::run_gnuplot(*gnuplot, dir, script);
  if (status == 0)
    std::printf("chart: %s\n", (dir / image).string().c_str());
  else
    std::printf("chart %s failed: gnuplot exited with status %d (run it yourself: cd %s && gnuplot %s)\n",
                image.c_str(), status, dir.string().c_str(), script.c_str());
}

} // namespace

int main(int argc, char** argv) {
  herd::arguments args;
  bool progress_always = false;
  bool progress_never = false;
  bool no_chart = false;
  std::uint64_t seed_value = 0;

  CLI::App app{"herd - many clients fail together and retry through the real coretry engine on virtual time.\n"
               "Compares no backoff, exponential backoff and full, equal and decorrelated jitter, with the\n"
               "retry budget off and on, in two scenarios: 'contention' (the optimistic-concurrency model of\n"
               "the AWS 'Exponential Backoff and Jitter' study) and 'outage' (a dependency that is down, then\n"
               "has a capacity). Prints tables, writes CSV files and draws arrivals over time with gnuplot.",
               "herd"};
  app.add_option("scenario", args.scenario, "contention, outage or all")->capture_default_str();
  app.add_option("--seed", seed_value,
                 "seed of every random draw; the same seed replays a run exactly (default: a new one, printed)");
  app.add_option("--strategies", args.strategies,
                 "all, or some of no-backoff,exponential,full,equal,decorrelated")->capture_default_str();
  app.add_option("--budget", args.budget, "retry budget: off, on or both")->capture_default_str();
  app.add_option("--gate", args.gate, "retry gate (outage scenario): off, on or both")->capture_default_str();
  app.add_option("--out", args.out_dir, "directory for CSV, gnuplot scripts and charts")->capture_default_str();
  app.add_flag("--no-chart", no_chart, "write the gnuplot scripts but do not run gnuplot");
  app.add_flag("--progress", progress_always, "show the progress bar even when stderr is not a terminal");
  app.add_flag("--no-progress", progress_never, "never show the progress bar");
  app.add_option("--net-mean", args.net_mean, "mean one-way network delay")->capture_default_str();
  app.add_option("--net-sd", args.net_sd, "standard deviation of the network delay")->capture_default_str();

  auto* contention = app.add_option_group("contention", "the contention scenario");
  contention->add_option("--contention-clients", args.contention_clients,
                         "client counts: first:last:step or a list a,b,c")->capture_default_str();
  contention->add_option("--runs", args.runs, "runs averaged per cell")->capture_default_str();
  contention->add_option("--base", args.base, "first backoff window")->capture_default_str();
  contention->add_option("--cap", args.cap, "largest backoff window")->capture_default_str();

  auto* outage = app.add_option_group("outage", "the outage scenario");
  outage->add_option("--clients", args.outage_clients, "clients")->capture_default_str();
  outage->add_option("--deadline", args.deadline, "each client's overall deadline")->capture_default_str();
  outage->add_option("--outage", args.outage, "how long the dependency is down")->capture_default_str();
  outage->add_option("--capacity", args.capacity, "requests served at a time after the outage")
      ->capture_default_str();
  outage->add_option("--service-time", args.service_time, "time to serve one request")->capture_default_str();
  outage->add_option("--max-attempts", args.max_attempts, "attempts per client, including the first")
      ->capture_default_str();
  outage->add_option("--outage-base", args.outage_base, "first backoff window")->capture_default_str();
  outage->add_option("--outage-cap", args.outage_cap, "largest backoff window")->capture_default_str();
  outage->add_option("--processes", args.processes, "processes the clients are spread over (1 to 10000)")
      ->capture_default_str();
  outage->add_option("--fleet", args.fleet,
                     "the processes' budgets and gates: local (each its own), shared (reconciled through a\n"
                     "model of the Redis store) or both (default: both with --processes 2 or more, else local)");
  outage->add_option("--reconcile", args.reconcile,
                     "shared fleet: how often each process exchanges with the store (1ms to 60s)")
      ->capture_default_str();
  app.footer("Durations take a unit: ns, us, ms, s or min (500ms, 2s, 1.5s).\n"
             "Exit status: 0 done; 1 an output could not be written; 2 bad command line.\n"
             "Example: herd --seed 42 --out herd-out\n");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::ParseError& error) {
    std::fprintf(stderr, "herd: %s (see herd --help)\n", one_line(error.what()).c_str());
    return exit_usage;
  }
  if (app.count("--seed")) args.seed = seed_value;
  args.chart = !no_chart;
  if (progress_always && progress_never) {
    std::fprintf(stderr, "herd: --progress and --no-progress contradict each other (see herd --help)\n");
    return exit_usage;
  }

  herd::plan plan;
  try {
    plan = herd::make_plan(args, fresh_seed());
  } catch (const herd::usage_error& error) {
    std::fprintf(stderr, "herd: %s (see herd --help)\n", one_line(error.what()).c_str());
    return exit_usage;
  }

  progress_bar bar(!progress_never && (progress_always || ::isatty(STDERR_FILENO)));
  const auto progress = [&](std::size_t done, std::size_t total, const std::string& what) {
    bar.update(done, total, what);
  };
  std::printf("herd: seed %llu (replay with --seed %llu)\n\n", static_cast<unsigned long long>(plan.seed),
              static_cast<unsigned long long>(plan.seed));
  std::fflush(stdout);

  try {
    const std::filesystem::path dir(plan.out_dir);
    std::filesystem::create_directories(dir);
    if (plan.contention) {
      const auto rows = herd::run_contention_study(plan.contention_study_, progress);
      bar.clear();
      herd::print_contention_table(stdout, plan.contention_study_, rows);
      herd::write_contention_csv(dir / "contention.csv", rows);
      herd::write_contention_calls_csv(dir / "contention_calls.csv", plan.contention_study_, rows);
      herd::write_text(dir / "contention.gp",
                       herd::contention_gnuplot_script(plan.contention_study_, "contention_calls.csv",
                                                       "contention.png"));
      std::printf("written: %s, %s\n", (dir / "contention.csv").string().c_str(),
                  (dir / "contention_calls.csv").string().c_str());
      render(dir, "contention.gp", "contention.png", plan.chart);
      std::printf("\n");
      std::fflush(stdout);
    }
    if (plan.outage) {
      const auto rows = herd::run_outage_study(plan.outage_study_, progress);
      bar.clear();
      herd::print_outage_table(stdout, plan.outage_study_, rows);
      herd::write_outage_csv(dir / "outage.csv", rows);
      herd::write_arrivals_csv(dir / "outage_arrivals.csv", rows);
      herd::write_text(dir / "arrivals.gp",
                       herd::arrivals_gnuplot_script(plan.outage_study_, rows, "outage_arrivals.csv", "arrivals.png"));
      std::printf("written: %s, %s\n", (dir / "outage.csv").string().c_str(),
                  (dir / "outage_arrivals.csv").string().c_str());
      render(dir, "arrivals.gp", "arrivals.png", plan.chart);
    }
  } catch (const std::exception& error) {
    bar.clear();
    std::fprintf(stderr, "herd: %s\n", one_line(error.what()).c_str());
    return exit_failure;
  }
  return exit_success;
}
