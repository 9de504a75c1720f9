#ifndef CORETRY_TESTS_HTTP_FLEET_HPP
#define CORETRY_TESTS_HTTP_FLEET_HPP

// A name's fleet on loopback for the HTTP tests: test servers on several
// loopback addresses (127.0.0.2, 127.0.0.3, ... need no setup on Linux)
// sharing one free port, and the client options and results that go with
// them.

#include "blocking_client.hpp"
#include "hostile_server.hpp"

#include <coretry/http/client.hpp>

#include <doctest/doctest.h>

#include <boost/system/system_error.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace coretry_tests::fleets {

using namespace std::chrono_literals;

/// Every request on the connection answered with `status` and no body.
inline hostile_server::script status_always(unsigned status, std::chrono::milliseconds delay = 0ms) {
  return [status, delay](hostile_server::peer& peer) {
    while (peer.read_request()) {
      if (delay > 0ms) std::this_thread::sleep_for(delay);
      if (!peer.send("HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Length: 0\r\n\r\n")) return;
    }
  };
}

/// Servers on several loopback addresses sharing one port (a name's fleet).
struct fleet {
  /// `scripts[i]` answers on `addresses[i]`; an empty script leaves that
  /// address with no listener (connections to it are refused).
  fleet(const std::vector<std::string>& addresses, const std::vector<hostile_server::script>& scripts) {
    for (int tries = 0; tries < 20 && servers.empty(); ++tries) {
      try {
        unsigned short port = 0;
        for (std::size_t i = 0; i < addresses.size(); ++i) {
          if (!scripts[i]) {
            servers.push_back(nullptr);
            continue;
          }
          servers.push_back(std::make_unique<hostile_server>(std::vector<hostile_server::script>{scripts[i]},
                                                             addresses[i], port));
          port = servers.back()->port();
        }
        this->port = port;
      } catch (const boost::system::system_error&) {
        servers.clear(); // the port was taken on another address: again
      }
    }
    REQUIRE_FALSE(servers.empty());
  }

  /// "pricing:PORT:A,B,..." for these addresses.
  std::string resolve(const std::vector<std::string>& addresses) const {
    std::string entry = "pricing:" + std::to_string(port) + ":";
    for (std::size_t i = 0; i < addresses.size(); ++i) entry += (i ? "," : "") + addresses[i];
    return entry;
  }
  std::string url(const std::string& target = "/") const { return "http://pricing:" + std::to_string(port) + target; }
  std::size_t requests(std::size_t i) const { return servers[i] ? servers[i]->requests().size() : 0; }

  std::vector<std::unique_ptr<hostile_server>> servers;
  unsigned short port = 0;
};

inline coretry::http::client_options pinned(const std::string& entry) {
  coretry::http::client_options o;
  o.resolve = {entry};
  return o;
}

inline coretry::http::request_options with_policy(coretry::policy p) {
  coretry::http::request_options options;
  options.policy = p;
  return options;
}

inline std::string address_of(const coretry::http::result& r) {
  return r.value && r.value->address ? coretry::http::to_string(*r.value->address) : "";
}

} // namespace coretry_tests::fleets

#endif
