#ifndef CORETRY_TESTS_SUPPORT_NGINX_HPP
#define CORETRY_TESTS_SUPPORT_NGINX_HPP

// nginx (Debian's nginx-light) on 127.0.0.1, started by the test in the
// foreground, one process, with a configuration, pid file and logs of its
// own in a temporary directory, on a free port: a real HTTP server for the
// HTTP client's tests.

#include "loopback_listener.hpp"
#include "program.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

namespace coretry::test {

/// nginx's program, or empty when it is not installed.
inline std::string nginx_program() {
  for (const char* path : {"/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"})
    if (::access(path, X_OK) == 0) return path;
  return {};
}

/// A running nginx serving `locations` (the text of location blocks, where
/// PORT stands for its port), stopped when destroyed. Its access log has one
/// line per request: "METHOD URI CONTENT_LENGTH AUTHORIZATION". Construct it
/// only when nginx_program() is not empty (else skip_test()).
class nginx {
public:
  explicit nginx(std::string locations) : locations_(std::move(locations)) {
    char pattern[] = "/tmp/coretry-nginx-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    directory_ = pattern;
    // The port is free when it is chosen; another program could take it
    // before nginx binds it, so a start that fails tries another.
    for (int tries = 0; tries < 5 && !child_; ++tries) start();
    REQUIRE_MESSAGE(child_, "nginx did not start; its error log: " << read("error.log"));
  }
  ~nginx() {
    child_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
  nginx(const nginx&) = delete;
  nginx& operator=(const nginx&) = delete;

  unsigned short port() const { return port_; }
  std::string url(const std::string& target) const { return "http://127.0.0.1:" + std::to_string(port_) + target; }
  /// The access log's lines so far.
  std::vector<std::string> requests() const {
    std::vector<std::string> lines;
    std::ifstream file(directory_ + "/access.log");
    for (std::string line; std::getline(file, line);) lines.push_back(line);
    return lines;
  }

private:
  std::string read(const std::string& name) const {
    std::ifstream file(directory_ + "/" + name);
    return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  }

  void start() {
    {
      loopback_listener probe;
      port_ = probe.port();
    }
    std::string locations = locations_;
    for (std::size_t at; (at = locations.find("PORT")) != std::string::npos;)
      locations.replace(at, 4, std::to_string(port_));
    const std::string& d = directory_;
    std::ofstream(d + "/nginx.conf")
        << "daemon off;\nmaster_process off;\nworker_processes 1;\npid " << d << "/nginx.pid;\n"
        << "error_log " << d << "/error.log warn;\nevents { worker_connections 64; }\n"
        << "http {\n  log_format lines '$request_method $uri $content_length $http_authorization';\n"
        << "  access_log " << d << "/access.log lines;\n"
        << "  client_body_temp_path " << d << "/body;\n  proxy_temp_path " << d << "/proxy;\n"
        << "  fastcgi_temp_path " << d << "/fastcgi;\n  uwsgi_temp_path " << d << "/uwsgi;\n"
        << "  scgi_temp_path " << d << "/scgi;\n"
        << "  server {\n    listen 127.0.0.1:" << port_ << ";\n" << locations << "\n  }\n}\n";
    child_.emplace(nginx_program(),
                   std::vector<std::string>{"-p", d, "-e", d + "/error.log", "-c", d + "/nginx.conf"});
    if (!wait_until_accepting(port_)) child_.reset();
  }

  std::string locations_;
  std::string directory_;
  unsigned short port_ = 0;
  std::optional<child_process> child_;
};

} // namespace coretry::test

#endif
