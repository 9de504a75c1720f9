#ifndef CORETRY_CLI_DEMO_HPP
#define CORETRY_CLI_DEMO_HPP

// `coretry demo`: the first thing a new user runs. Starts the fault server in
// this process and replays the specification's failures against it with the
// coretry HTTP client, printing what happened as the seeds' tables and
// timelines, measured now.
namespace coretry::cli {

/// Returns 0 when every case behaved as the seeds say, 1 otherwise (after
/// naming each case that deviated).
int run_demo();

} // namespace coretry::cli

#endif
