#include "cli/faults_command.hpp"

#include "cli/command_line.hpp"
#include "cli/exit_status.hpp"

#include <coretry/http/tls.hpp>
#include <faults/fault_server.hpp>

#include <boost/asio/signal_set.hpp>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

namespace coretry::cli {
namespace {

void write_file(const std::string& path, const std::string& content) {
  std::ofstream file{path, std::ios::binary | std::ios::trunc};
  file << content;
  file.close();
  if (!file) throw std::runtime_error("cannot write '" + path + "'");
}

// A logged request holds its header fields: a few hundred bytes to a few
// kilobytes each, so this caps the log near a gigabyte at worst.
constexpr unsigned most_logged_requests = 1'000'000;
constexpr unsigned most_clients = 100'000;

// Whole milliseconds, rounded up so that a positive value stays positive.
std::chrono::milliseconds timeout_option(std::string_view option, const std::string& text) {
  return std::chrono::ceil<std::chrono::milliseconds>(parse_seconds(option, text, false));
}

} // namespace

std::string default_listen_address() { return coretry::faults::fault_server_options{}.listen; }

int run_faults(const faults_arguments& args) {
  if (args.ca_out && !args.tls) throw usage_error("--ca-out needs --tls: a plain HTTP server has no CA");
  if (args.tls_client_ca && !args.tls)
    throw usage_error("--tls-client-ca needs --tls: client certificates are asked for in the TLS handshake");
  coretry::faults::fault_server_options options;
  if (args.listen) options.listen = *args.listen;
  options.tls = args.tls;
  if (args.tls_client_ca) {
    // The same check as a client's --cacert: a file of PEM certificates.
    if (auto problem = http::ca_file_problem(*args.tls_client_ca)) throw usage_error("--tls-client-ca: " + *problem);
    std::ifstream file{*args.tls_client_ca, std::ios::binary};
    std::ostringstream content;
    content << file.rdbuf();
    if (!file) throw usage_error("--tls-client-ca: cannot read '" + *args.tls_client_ca + "'");
    options.client_ca_pem = content.str();
  }
  if (args.log_limit) options.log_limit = parse_count("--log-limit", *args.log_limit, 0, most_logged_requests);
  if (args.header_timeout) options.limits.header_timeout = timeout_option("--header-timeout", *args.header_timeout);
  if (args.keep_alive_timeout)
    options.limits.keep_alive_timeout = timeout_option("--keep-alive-timeout", *args.keep_alive_timeout);
  if (args.send_timeout) options.limits.send_timeout = timeout_option("--send-timeout", *args.send_timeout);
  if (args.max_clients) options.max_clients = parse_count("--max-clients", *args.max_clients, 1, most_clients);
  using coretry::faults::most_capacity_workers;
  using coretry::faults::longest_service_time;
  using coretry::faults::most_capacity_queue;
  if (args.workers) options.capacity.workers = parse_count("--workers", *args.workers, 1, most_capacity_workers);
  if (args.service_ms)
    options.capacity.service_time = std::chrono::milliseconds{
        parse_count("--service-ms", *args.service_ms, 0, static_cast<unsigned>(longest_service_time.count()))};
  if (args.queue_limit)
    options.capacity.queue_limit = parse_count("--queue-limit", *args.queue_limit, 0, most_capacity_queue);

  boost::asio::io_context io{1};
  std::optional<coretry::faults::fault_server> server;
  try {
    server.emplace(io, options);
  } catch (const std::invalid_argument& error) { // a --listen value that is no address
    throw usage_error(std::string{"--listen: "} + error.what());
  }
  if (args.ca_out) write_file(*args.ca_out, server->ca_certificate_pem());

  boost::asio::signal_set signals{io, SIGINT, SIGTERM};
  signals.async_wait([&server](const boost::system::error_code& error, int) {
    if (!error) server->stop();
  });
  std::printf("listening on %s\n", server->base_url().c_str());
  std::fflush(stdout);
  // Returns once stop() has closed the acceptor and every connection.
  io.run();
  return exit_status::success;
}

} // namespace coretry::cli
