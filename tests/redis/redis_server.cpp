#include "redis_server.hpp"

#include <faults/test_pki.hpp>

#include <filesystem>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace redis_tests {
namespace {

constexpr const char* program = "/usr/bin/redis-server";

sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads one reply from `fd` into `out`, with `buffer` holding what was read
// and not yet used. False when the connection ends or `until` passes.
class reader {
public:
  reader(int fd, std::chrono::steady_clock::time_point until) : fd_(fd), until_(until) {}

  bool line(std::string& out) {
    for (;;) {
      const auto end = buffer_.find("\r\n", pos_);
      if (end != std::string::npos) {
        out = buffer_.substr(pos_, end - pos_);
        pos_ = end + 2;
        return true;
      }
      if (!more()) return false;
    }
  }
  bool bytes(std::size_t n, std::string& out) {
    while (buffer_.size() - pos_ < n + 2)
      if (!more()) return false;
    out = buffer_.substr(pos_, n);
    pos_ += n + 2;
    return true;
  }
  bool read(resp& r, int depth = 0) {
    if (depth > 8) return false;
    std::string header;
    if (!line(header) || header.empty()) return false;
    r.type = header[0];
    const std::string rest = header.substr(1);
    switch (r.type) {
    case '+':
    case '-': r.text = rest; return true;
    case ':': r.integer = std::stoll(rest); return true;
    case '$': {
      const long long n = std::stoll(rest);
      if (n < 0) {
        r.nil = true;
        return true;
      }
      return bytes(static_cast<std::size_t>(n), r.text);
    }
    case '*': {
      const long long n = std::stoll(rest);
      if (n < 0) {
        r.nil = true;
        return true;
      }
      if (n > 100000) return false;
      r.elements.resize(static_cast<std::size_t>(n));
      for (auto& e : r.elements)
        if (!read(e, depth + 1)) return false;
      return true;
    }
    default: return false;
    }
  }

private:
  bool more() {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char chunk[4096];
    const ssize_t got = ::recv(fd_, chunk, sizeof chunk, 0);
    if (got <= 0) return false;
    buffer_.append(chunk, static_cast<std::size_t>(got));
    return true;
  }
  int fd_;
  std::chrono::steady_clock::time_point until_;
  std::string buffer_;
  std::size_t pos_ = 0;
};

std::string encode(const std::vector<std::string>& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const auto& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return out;
}

std::optional<resp> exchange(int fd, const std::vector<std::vector<std::string>>& commands,
                             std::chrono::steady_clock::time_point until) {
  std::string out;
  for (const auto& c : commands) out += encode(c);
  if (::send(fd, out.data(), out.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(out.size())) return std::nullopt;
  reader in(fd, until);
  resp r;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    r = resp{};
    if (!in.read(r)) return std::nullopt;
  }
  return r;
}

} // namespace

std::optional<resp> send_commands(std::uint16_t port, const std::vector<std::vector<std::string>>& commands,
                                  std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  fd_guard s{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  if (s.fd < 0) return std::nullopt;
  const sockaddr_in a = loopback(port);
  if (::connect(s.fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    if (errno != EINPROGRESS) return std::nullopt;
    pollfd p{s.fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return std::nullopt;
    int error = 0;
    socklen_t length = sizeof error;
    if (::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) return std::nullopt;
  }
  return exchange(s.fd, commands, until);
}

std::optional<resp> send_command(std::uint16_t port, const std::vector<std::string>& args,
                                 std::chrono::milliseconds timeout) {
  return send_commands(port, {args}, timeout);
}

std::uint16_t free_port() {
  fd_guard s{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (s.fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in a = loopback(0);
  if (::bind(s.fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("bind failed");
  socklen_t length = sizeof a;
  ::getsockname(s.fd, reinterpret_cast<sockaddr*>(&a), &length);
  return ntohs(a.sin_port);
}

bool redis_installed() { return ::access(program, X_OK) == 0; }

redis_server::redis_server(options opts) : opts_(std::move(opts)) {
  if (opts_.tls) make_certificates();
  for (int attempt = 0; attempt < 10; ++attempt) {
    port_ = free_port();
    if (opts_.tls) tls_port_ = free_port();
    spawn();
    if (answers(10s)) {
      add_acl_user();
      return;
    }
    kill(); // the port was taken meanwhile, or it did not start: another port
  }
  throw std::runtime_error("redis-server did not start");
}

redis_server::~redis_server() {
  if (pid_ > 0) {
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGTERM);
    reap(5s);
  }
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

void redis_server::make_certificates() {
  std::string pattern = (std::filesystem::temp_directory_path() / "coretry-redis-tls-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  dir_ = pattern;
  coretry::faults::pki_options o;
  o.client_certificate = true;
  if (opts_.tls_wrong_name) {
    o.dns_names = {"elsewhere.example"};
    o.ip_addresses = {"192.0.2.1"};
  }
  const auto pki = coretry::faults::generate_test_pki(o);
  const auto write = [&](const char* name, const std::string& content) {
    std::ofstream out(dir_ + "/" + name, std::ios::binary);
    out << content;
    if (!out) throw std::runtime_error(std::string("cannot write ") + name);
  };
  write("ca.pem", pki.ca_pem);
  write("server.pem", pki.cert_pem);
  write("server.key", pki.key_pem);
  write("client.pem", pki.client_cert_pem);
  write("client.key", pki.client_key_pem);
}

void redis_server::add_acl_user() {
  if (opts_.acl_user.empty()) return;
  const auto added = send_commands(port_, {{"ACL", "SETUSER", opts_.acl_user, "on", ">" + opts_.acl_password, "~*",
                                            "&*", "+@all"},
                                           {"ACL", "SETUSER", "default", "off"}},
                                   2s);
  if (!added || added->type != '+') throw std::runtime_error("redis-server refused the ACL user");
}

std::string redis_server::url() const {
  return opts_.password.empty() ? "redis://127.0.0.1:" + std::to_string(port_)
                                : "redis://:" + opts_.password + "@127.0.0.1:" + std::to_string(port_);
}

std::optional<resp> redis_server::command(const std::vector<std::string>& args) const {
  if (!opts_.acl_user.empty()) return send_commands(port_, {{"AUTH", opts_.acl_user, opts_.acl_password}, args}, 2s);
  if (opts_.password.empty()) return send_command(port_, args);
  return send_commands(port_, {{"AUTH", opts_.password}, args}, 2s);
}

void redis_server::spawn() {
  std::vector<std::string> args = {program, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--dir", "/tmp", "--loglevel", "warning"};
  if (!opts_.password.empty()) {
    args.push_back("--requirepass");
    args.push_back(opts_.password);
  }
  if (opts_.tls) {
    args.insert(args.end(), {"--tls-port", std::to_string(tls_port_), "--tls-cert-file", dir_ + "/server.pem",
                             "--tls-key-file", dir_ + "/server.key", "--tls-ca-cert-file", ca_file(),
                             "--tls-auth-clients", opts_.tls_auth_clients ? "yes" : "no"});
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // fork and exec rather than posix_spawn: the server is killed with the
  // test (PR_SET_PDEATHSIG) even when the test crashes or aborts. Between
  // fork and exec only async-signal-safe calls.
  const int null_in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int null_out = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(null_in, 0);
    ::dup2(null_out, 1);
    ::dup2(null_out, 2);
    ::execve(program, argv.data(), environ);
    ::_exit(127);
  }
  const int error = errno;
  ::close(null_in);
  ::close(null_out);
  if (child < 0) {
    pid_ = -1;
    throw std::runtime_error(std::string("fork for redis-server: ") + std::strerror(error));
  }
  pid_ = child;
}

bool redis_server::answers(std::chrono::milliseconds within) {
  bool exited = false;
  const bool ok = eventually(
      [&] {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) exited = true;
        if (exited) return true;
        const auto r = command({"PING"});
        return r && (r->type == '+' || r->type == '-');
      },
      within);
  if (exited) pid_ = -1;
  return ok && !exited;
}

void redis_server::reap(std::chrono::milliseconds within) {
  if (pid_ <= 0) return;
  int status = 0;
  const bool gone = eventually([&] { return ::waitpid(pid_, &status, WNOHANG) != 0; }, within);
  if (!gone) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
  }
  pid_ = -1;
}

void redis_server::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  reap(5s);
}

void redis_server::pause() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void redis_server::resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

void redis_server::restart() {
  kill();
  // The port is this test's: it was listening a moment ago. Another
  // program may still take it; then the test fails rather than hangs.
  for (int attempt = 0; attempt < 50; ++attempt) {
    spawn();
    if (answers(10s)) {
      add_acl_user();
      return;
    }
    kill();
    std::this_thread::sleep_for(100ms);
  }
  throw std::runtime_error("redis-server did not start again on its port");
}

io_thread::io_thread() : guard_(io_.get_executor()), thread_([this] { io_.run(); }) {}

io_thread::~io_thread() { stop(); }

void io_thread::stop() {
  guard_.reset();
  io_.stop();
  if (thread_.joinable()) thread_.join();
}

namespace {

// `o` with on_problem telling `told`.
coretry::redis::shared_state::options telling(coretry::redis::shared_state::options o, problems& told) {
  o.on_problem = told.callback();
  return o;
}

} // namespace

fleet_process::fleet_process(coretry::redis::shared_state::options o, bool start)
    : state(io.executor(), telling(std::move(o), told)), budget(state.budget("pricing", pricing_budget())) {
  if (start) state.start();
}

coretry::redis::shared_state::options fleet_options(const redis_server& server, std::string id, bool rediss,
                                                    coretry::duration period) {
  auto o = fleet_options(rediss ? server.tls_port() : server.port(), std::move(id), period);
  if (!rediss) return o;
  if (server.tls_port() == 0) throw std::logic_error("fleet_options: this redis-server has no TLS port");
  o.server.tls = true;
  o.tls.ca_file = server.ca_file();
  o.tls.cert_file = server.client_cert_file();
  o.tls.key_file = server.client_key_file();
  return o;
}

long peak_rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return 0;
}

} // namespace redis_tests
