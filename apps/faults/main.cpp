// coretry-faults: runs the fault-injection HTTP server by hand.
//
//   coretry-faults [--listen IP:PORT] [--tls [--ca-out FILE]]
//
// Prints "listening on URL" as its first line once it accepts connections,
// and serves until SIGINT or SIGTERM.
#include "faults/fault_server.hpp"

#include <boost/asio/signal_set.hpp>

#include <csignal>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace {

constexpr std::string_view usage = "usage: coretry-faults [--listen IP:PORT] [--tls [--ca-out FILE]]\n"
                                   "  --listen IP:PORT  address to serve on (default 127.0.0.1:0, a free port)\n"
                                   "  --tls             serve HTTPS with a freshly generated test CA\n"
                                   "  --ca-out FILE     write that CA's certificate (PEM) to FILE\n";

struct command_line {
  coretry::faults::fault_server_options server;
  std::optional<std::string> ca_out;
  bool help = false;
};

class usage_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

command_line parse_command_line(int argc, char** argv) {
  command_line parsed;
  bool listen_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw usage_error(std::string{argument} + " needs a value");
      return argv[++i];
    };
    if (argument == "--help" || argument == "-h") {
      parsed.help = true;
    } else if (argument == "--listen") {
      if (listen_given) throw usage_error("--listen is given more than once");
      listen_given = true;
      parsed.server.listen = value();
    } else if (argument == "--tls") {
      parsed.server.tls = true;
    } else if (argument == "--ca-out") {
      if (parsed.ca_out) throw usage_error("--ca-out is given more than once");
      parsed.ca_out = value();
    } else {
      throw usage_error("unknown argument '" + std::string{argument} + "'");
    }
  }
  if (parsed.ca_out && !parsed.server.tls) throw usage_error("--ca-out needs --tls");
  return parsed;
}

void write_file(const std::string& path, const std::string& content) {
  std::ofstream file{path, std::ios::binary | std::ios::trunc};
  file << content;
  file.close();
  if (!file) throw std::runtime_error("cannot write '" + path + "'");
}

} // namespace

int main(int argc, char** argv) {
  command_line options;
  try {
    options = parse_command_line(argc, argv);
  } catch (const usage_error& error) {
    std::cerr << "coretry-faults: " << error.what() << "\n" << usage;
    return 2;
  }
  if (options.help) {
    std::cout << usage;
    return 0;
  }

  try {
    boost::asio::io_context io;
    coretry::faults::fault_server server{io, options.server};
    // Written before announcing, so that whoever waits for the line can use the CA.
    if (options.ca_out) write_file(*options.ca_out, server.ca_certificate_pem());

    boost::asio::signal_set signals{io, SIGINT, SIGTERM};
    signals.async_wait([&server](const boost::system::error_code& error, int) {
      if (!error) server.stop();
    });
    std::cout << "listening on " << server.base_url() << std::endl;
    // Returns once stop() has closed the acceptor and every connection.
    io.run();
    return 0;
  } catch (const std::invalid_argument& error) { // a --listen value that is no address
    std::cerr << "coretry-faults: " << error.what() << "\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "coretry-faults: " << error.what() << "\n";
    return 1;
  }
}
