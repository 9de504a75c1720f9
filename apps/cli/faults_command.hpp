#ifndef CORETRY_CLI_FAULTS_COMMAND_HPP
#define CORETRY_CLI_FAULTS_COMMAND_HPP

#include <optional>
#include <string>

// `coretry faults`: the fault-injection HTTP server, run by hand.
namespace coretry::cli {

struct faults_arguments {
  std::optional<std::string> listen; ///< IP:PORT as typed; default_listen_address() when not given
  bool tls = false;
  std::optional<std::string> ca_out;
  std::optional<std::string> tls_client_ca; ///< PEM file of the CAs whose client certificates are required
  std::optional<std::string> log_limit; ///< requests kept for /_log, as typed
  std::optional<std::string> header_timeout;     ///< seconds, as typed
  std::optional<std::string> keep_alive_timeout; ///< seconds, as typed
  std::optional<std::string> send_timeout;       ///< seconds, as typed
  std::optional<std::string> max_clients;        ///< as typed
  std::optional<std::string> workers;            ///< the capacity route's workers, as typed
  std::optional<std::string> service_ms;         ///< its service time in milliseconds, as typed
  std::optional<std::string> queue_limit;        ///< requests its queue holds, as typed
};

/// Where the fault server listens unless told otherwise (any free loopback port).
std::string default_listen_address();

/// Serves until SIGINT or SIGTERM. Prints "listening on URL" as the first
/// line of stdout (flushed) once it accepts connections, after writing the CA
/// to --ca-out, so that whoever waits for that line can use both. Returns the
/// exit status; throws usage_error for an unusable --tls-client-ca, a bad --listen, --log-limit,
/// --header-timeout, --keep-alive-timeout, --send-timeout, --max-clients,
/// --workers, --service-ms or --queue-limit.
int run_faults(const faults_arguments& args);

} // namespace coretry::cli

#endif
