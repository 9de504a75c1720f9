#include "herd/herd_report.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <tuple>
#include <sstream>
#include <stdexcept>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace herd {
namespace {

double ms(duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::string column_name(strategy s, bool budget, bool gate = false) {
  return std::string(to_string(s)) + (budget ? "+budget" : "") + (gate ? "+gate" : "");
}

/// A fleet's rows say which fleet mode they ran with (see is_fleet_study).
bool fleet_rows(const std::vector<outage_row>& rows) {
  return std::any_of(rows.begin(), rows.end(),
                     [](const outage_row& r) { return r.processes > 1 || r.fleet != fleet_mode::local; });
}

std::string row_name(const outage_row& r, bool fleet) {
  return column_name(r.retry, r.budget, r.gate) + (fleet ? " " + std::string(to_string(r.fleet)) : "");
}

std::ofstream open_for_writing(const std::filesystem::path& file) {
  std::ofstream out(file, std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + file.string() + ": " + std::strerror(errno));
  return out;
}

void close_checked(std::ofstream& out, const std::filesystem::path& file) {
  out.close();
  if (!out) throw std::runtime_error("cannot write " + file.string());
}

const contention_row* find_row(const std::vector<contention_row>& rows, unsigned clients, strategy s, bool budget) {
  for (const auto& r : rows)
    if (r.clients == clients && r.retry == s && r.budget == budget) return &r;
  return nullptr;
}

template <class Cell>
void print_grid(std::FILE* out, const char* title, const contention_study& study,
                const std::vector<contention_row>& rows, bool budget, Cell cell) {
  std::fprintf(out, "%s\n%8s", title, "clients");
  for (strategy s : study.strategies) std::fprintf(out, " %13s", std::string(to_string(s)).c_str());
  std::fprintf(out, "\n");
  for (unsigned n : study.client_counts) {
    std::fprintf(out, "%8u", n);
    for (strategy s : study.strategies) {
      const contention_row* r = find_row(rows, n, s, budget);
      std::fprintf(out, " %13s", r ? cell(*r).c_str() : "-");
    }
    std::fprintf(out, "\n");
  }
  std::fprintf(out, "\n");
}

std::string fixed(double v, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, v);
  return buffer;
}

} // namespace

void print_contention_table(std::FILE* out, const contention_study& study, const std::vector<contention_row>& rows) {
  std::fprintf(out,
               "CONTENTION: one optimistic-concurrency row, every client writes it once; base %.0f ms, cap %.0f ms,\n"
               "network |Normal(%.1f ms, %.1f ms)| each way; mean of %u runs per cell; attempts unlimited\n\n",
               ms(study.base), ms(study.cap), ms(study.network.mean), ms(study.network.sd), study.runs);
  for (bool budget : study.budgets) {
    const char* suffix = budget ? " (budget on: token bucket 20, +0.1 per initial request)" : " (budget off)";
    print_grid(out, (std::string("calls to the row") + suffix).c_str(), study, rows, budget,
               [](const contention_row& r) { return fixed(r.mean_calls, 0); });
    print_grid(out, (std::string("completion time of the last client, ms") + suffix).c_str(), study, rows, budget,
               [](const contention_row& r) { return fixed(r.mean_completion_ms, 0); });
    if (budget)
      print_grid(out, "clients that wrote, % (budget on)", study, rows, budget,
                 [](const contention_row& r) { return fixed(100.0 * r.success_rate, 1); });
  }
}

void print_outage_table(std::FILE* out, const outage_study& study, const std::vector<outage_row>& rows) {
  const outage_config& c = study.config;
  std::fprintf(out,
               "OUTAGE: %u clients start together; the dependency fails everything for %.0f ms, then serves\n"
               "%u requests at a time (%.0f ms each) and turns the rest away; up to %u attempts per client,\n"
               "windows from %.0f ms to %.0f ms, a deadline of %.0f ms per client; arrivals counted per 10 ms;\n"
               "times to success of the clients that succeeded\n\n",
               c.clients, ms(c.outage), c.capacity, ms(c.service_time), c.max_attempts, ms(c.base), ms(c.cap),
               ms(c.deadline));
  const bool fleet = is_fleet_study(study);
  const int name_width = fleet ? 31 : 27;
  if (fleet)
    std::fprintf(out,
                 "FLEET: the clients are spread over %u processes; local: each process has its own budget and gate;\n"
                 "shared: each has a leased budget (up to %u tokens) and a gate reconciled every %.0f ms with one\n"
                 "model of the Redis store (exchanges are instantaneous, each process at its own phase)\n\n",
                 c.processes, lease_size, ms(c.reconcile));
  std::fprintf(out, "%-*s %7s %8s %7s %7s %6s %6s %6s %6s %6s %6s %8s %8s %8s %8s\n", name_width, "strategy", "calls",
               "att/cli", "wasted", "reject", "peak", "peakR", "peakA", "succ%", "budget", "gate", "p50 ms", "p90 ms",
               "p99 ms", "last ms");
  for (const auto& r : rows) {
    const double clients = r.clients ? static_cast<double>(r.clients) : 1.0;
    std::fprintf(out, "%-*s %7llu %8.2f %7.3f %7.3f %6u %6u %6u %6.1f %6u %6u %8.0f %8.0f %8.0f %8.0f\n",
                 name_width, row_name(r, fleet).c_str(), static_cast<unsigned long long>(r.calls),
                 r.attempts_per_client, static_cast<double>(r.failed_retries_in_outage) / clients,
                 static_cast<double>(r.rejected_after_recovery) / clients, r.peak_arrivals, r.peak_retry_arrivals,
                 r.peak_after_recovery, 100.0 * r.success_rate, r.budget_stops, r.gate_stops, ms(r.p50), ms(r.p90),
                 ms(r.p99), ms(r.completion));
  }
  std::fprintf(out,
               "\nwasted: retries per client that reached the dependency while it was down; reject: calls per client\n"
               "the recovered dependency turned away for capacity; peak: most calls in any 10 ms; peakR: most retries\n"
               "in any 10 ms; peakA: most calls in any 10 ms after the dependency is back; budget, gate: clients\n"
               "stopped by the retry budget, by the retry gate; last: when the last client finished, success or not\n\n");
  if (!fleet) return;
  std::fprintf(out, "%-31s %6s %8s %8s %6s %6s %8s %9s\n", "strategy", "procs", "wasted", "retries", "amp", "succ%",
               "p99 ms", "probes/s");
  for (const auto& r : rows)
    std::fprintf(out, "%-31s %6u %8llu %8llu %6.2f %6.1f %8.0f %9s\n", row_name(r, true).c_str(), r.processes,
                 static_cast<unsigned long long>(r.failed_retries_in_outage), static_cast<unsigned long long>(r.retries),
                 r.amplification, 100.0 * r.success_rate, ms(r.p99),
                 r.fleet_probes_per_s ? fixed(*r.fleet_probes_per_s, 1).c_str() : "-");
  std::fprintf(out,
               "\nwasted: retries of the whole fleet that reached the dependency while it was down; amp: calls per\n"
               "client; probes/s: retries the fleet's gates admitted per second while every one of them was closed,\n"
               "from the instant the last closed to the end of the outage (-: a gate did not close in the outage)\n\n");
}

void write_contention_csv(const std::filesystem::path& file, const std::vector<contention_row>& rows) {
  auto out = open_for_writing(file);
  out << "clients,strategy,budget,runs,mean_calls,mean_completion_ms,success_rate\n";
  for (const auto& r : rows)
    out << r.clients << ',' << to_string(r.retry) << ',' << (r.budget ? "on" : "off") << ',' << r.runs << ','
        << fixed(r.mean_calls, 2) << ',' << fixed(r.mean_completion_ms, 3) << ',' << fixed(r.success_rate, 4) << '\n';
  close_checked(out, file);
}

void write_outage_csv(const std::filesystem::path& file, const std::vector<outage_row>& rows) {
  auto out = open_for_writing(file);
  out << "strategy,budget,gate,clients,calls,retries,attempts_per_client,max_attempts_per_client,success_rate,"
         "budget_stops,gate_stops,failed_retries_in_outage,rejected_after_recovery,"
         "peak_arrivals_10ms,peak_retry_arrivals_10ms,peak_after_recovery_10ms,"
         "p50_ms,p90_ms,p99_ms,max_ms,last_completion_ms";
  const bool fleet = fleet_rows(rows);
  if (fleet) out << ",fleet,processes,reconcile_ms,amplification,fleet_probes_per_s";
  out << '\n';
  for (const auto& r : rows) {
    out << to_string(r.retry) << ',' << (r.budget ? "on" : "off") << ',' << (r.gate ? "on" : "off") << ','
        << r.clients << ',' << r.calls << ',' << r.retries << ',' << fixed(r.attempts_per_client, 3) << ','
        << r.max_attempts_per_client << ',' << fixed(r.success_rate, 4) << ',' << r.budget_stops << ','
        << r.gate_stops << ',' << r.failed_retries_in_outage << ',' << r.rejected_after_recovery << ','
        << r.peak_arrivals << ',' << r.peak_retry_arrivals << ',' << r.peak_after_recovery << ','
        << fixed(ms(r.p50), 3) << ',' << fixed(ms(r.p90), 3) << ',' << fixed(ms(r.p99), 3) << ','
        << fixed(ms(r.max), 3) << ',' << fixed(ms(r.completion), 3);
    if (fleet)
      out << ',' << to_string(r.fleet) << ',' << r.processes << ',' << fixed(ms(r.reconcile), 3) << ','
          << fixed(r.amplification, 3) << ',' << (r.fleet_probes_per_s ? fixed(*r.fleet_probes_per_s, 3) : "");
    out << '\n';
  }
  close_checked(out, file);
}

void write_arrivals_csv(const std::filesystem::path& file, const std::vector<outage_row>& rows) {
  auto out = open_for_writing(file);
  std::size_t buckets = 0;
  const bool fleet = fleet_rows(rows);
  out << "time_ms";
  for (const auto& r : rows) {
    out << ',' << (fleet ? column_name(r.retry, r.budget, r.gate) + "/" + std::string(to_string(r.fleet))
                         : column_name(r.retry, r.budget, r.gate));
    buckets = std::max(buckets, r.arrivals.size());
  }
  out << '\n';
  const double width = ms(bucket_width);
  for (std::size_t b = 0; b < buckets; ++b) {
    out << fixed(static_cast<double>(b) * width, 0);
    for (const auto& r : rows) out << ',' << (b < r.arrivals.size() ? r.arrivals[b] : 0);
    out << '\n';
  }
  close_checked(out, file);
}

std::string arrivals_gnuplot_script(const outage_study& study, const std::vector<outage_row>& rows,
                                    const std::string& data, const std::string& image) {
  // Column of each (strategy, budget, gate, fleet) in the data file: time is column 1.
  std::map<std::tuple<strategy, bool, bool, fleet_mode>, std::size_t> column;
  for (std::size_t i = 0; i < rows.size(); ++i)
    column[{rows[i].retry, rows[i].budget, rows[i].gate, rows[i].fleet}] = i + 2;
  const bool fleet = is_fleet_study(study);
  std::vector<strategy> shown;
  for (strategy s : study.strategies)
    for (const auto& [key, index] : column)
      if (std::get<0>(key) == s) {
        shown.push_back(s);
        break;
      }

  const outage_config& c = study.config;
  std::ostringstream g;
  g << "# Arrivals at the dependency per 10 ms, one panel per retry strategy.\n"
    << "# Written by herd; render with: gnuplot " << "arrivals.gp" << "\n"
    << "set terminal pngcairo size 1100," << 220 * std::max<std::size_t>(shown.size(), 1) + 60
    << " font 'sans,9'\n"
    << "set output '" << image << "'\n"
    << "set datafile separator ','\n"
    << "set key top right\n"
    << "set grid\n"
    << "set xrange [0:*]\n"
    << "set yrange [0:" << c.clients << "]\n"
    << "set arrow from " << ms(c.outage) << ",graph 0 to " << ms(c.outage)
    << ",graph 1 nohead dashtype 2 lc rgb '#888888'\n"
    << "set multiplot layout " << std::max<std::size_t>(shown.size(), 1) << ",1 title '" << c.clients
    << " clients" << (fleet ? " over " + std::to_string(c.processes) + " processes" : "") << ", dependency down for " << ms(c.outage) << " ms then " << c.capacity
    << " at a time: calls arriving per 10 ms'\n";
  for (std::size_t i = 0; i < shown.size(); ++i) {
    const strategy s = shown[i];
    g << "set title '" << to_string(s) << "'\n";
    g << (i + 1 == shown.size() ? "set xlabel 'virtual time, ms'\n" : "unset xlabel\n");
    g << "set ylabel 'calls / 10 ms'\n";
    g << "plot ";
    bool first = true;
    struct line {
      bool budget, gate;
      const char* colour;
      const char* title;
    };
    for (fleet_mode f : {fleet_mode::local, fleet_mode::shared})
      for (const line& l : {line{false, false, "#1f77b4", "neither"}, line{true, false, "#d62728", "budget"},
                            line{false, true, "#2ca02c", "gate"}, line{true, true, "#9467bd", "budget+gate"}}) {
        const auto found = column.find({s, l.budget, l.gate, f});
        if (found == column.end()) continue;
        if (!first) g << ", ";
        first = false;
        g << "'" << data << "' using 1:" << found->second << " skip 1 with steps lw 1.2 "
          << (f == fleet_mode::shared ? "dt 2 " : "") << "lc rgb '" << l.colour << "' title '" << l.title
          << (fleet ? " " + std::string(to_string(f)) : "") << "'";
      }
    g << "\n";
  }
  g << "unset multiplot\n";
  return g.str();
}

void write_contention_calls_csv(const std::filesystem::path& file, const contention_study& study,
                                const std::vector<contention_row>& rows) {
  auto out = open_for_writing(file);
  out << "clients";
  for (bool budget : study.budgets)
    for (strategy s : study.strategies) out << ',' << column_name(s, budget);
  out << '\n';
  for (unsigned n : study.client_counts) {
    out << n;
    for (bool budget : study.budgets)
      for (strategy s : study.strategies) {
        const contention_row* r = find_row(rows, n, s, budget);
        out << ',';
        if (r) out << fixed(r->mean_calls, 2);
      }
    out << '\n';
  }
  close_checked(out, file);
}

std::string contention_gnuplot_script(const contention_study& study, const std::string& data,
                                      const std::string& image) {
  std::ostringstream g;
  g << "# Calls to the contended row per number of clients (mean of " << study.runs << " runs).\n"
    << "# Written by herd; render with: gnuplot contention.gp\n"
    << "set terminal pngcairo size 1100,500 font 'sans,9'\n"
    << "set output '" << image << "'\n"
    << "set datafile separator ','\n"
    << "set key top left\n"
    << "set grid\n"
    << "set xlabel 'clients'\nset ylabel 'calls (mean per run)'\n"
    << "set title 'Optimistic-concurrency contention: total calls per strategy'\n"
    << "plot ";
  std::size_t col = 2;
  for (bool budget : study.budgets)
    for (strategy s : study.strategies) {
      if (col > 2) g << ", ";
      g << "'" << data << "' using 1:" << col++ << " skip 1 with linespoints " << (budget ? "dt 2 " : "")
        << "title '" << column_name(s, budget) << "'";
    }
  g << "\n";
  return g.str();
}

void write_text(const std::filesystem::path& file, const std::string& text) {
  auto out = open_for_writing(file);
  out << text;
  close_checked(out, file);
}

std::optional<std::filesystem::path> find_gnuplot() {
  const char* path = std::getenv("PATH");
  if (!path) return std::nullopt;
  std::string_view rest(path);
  for (;;) {
    const auto at = rest.find(':');
    const std::string_view dir = rest.substr(0, at);
    if (!dir.empty()) {
      std::filesystem::path candidate = std::filesystem::path(dir) / "gnuplot";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    if (at == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(at + 1);
  }
}

int run_gnuplot(const std::filesystem::path& gnuplot, const std::filesystem::path& dir, const std::string& script) {
  // posix_spawn, not system(): no shell, so no quoting of paths.
  const std::string program = gnuplot.string();
  std::vector<char*> argv{const_cast<char*>(program.c_str()), const_cast<char*>(script.c_str()), nullptr};
  // gnuplot runs in `dir`, where the script names its data and image.
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

} // namespace herd
