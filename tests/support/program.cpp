#include "program.hpp"

#include <boost/json/parse.hpp>

#include <doctest/doctest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace coretry::test {

using namespace std::chrono_literals;

namespace {

void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string{what} + ": " + std::strerror(errno));
}

int decode_wait_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

} // namespace

std::vector<std::string> run_result::err_lines() const {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < err.size()) {
    const auto end = err.find('\n', start);
    lines.push_back(err.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return lines;
}

boost::json::object run_result::json() const {
  boost::system::error_code error;
  boost::json::value value = boost::json::parse(out, error);
  INFO("stdout: " << out);
  REQUIRE_FALSE(error);
  REQUIRE(value.is_object());
  return value.as_object();
}

child_process::child_process(const std::string& program, std::vector<std::string> args)
    : child_process(program, std::move(args), options{}) {}

child_process::child_process(const std::string& program, std::vector<std::string> args, options opts) {
  int out_pipe[2];
  int err_pipe[2] = {-1, -1};
  check(::pipe2(out_pipe, O_CLOEXEC) == 0, "pipe2");
  std::string terminal_name;
  if (opts.stderr_on_terminal) {
    err_fd_ = ::posix_openpt(O_RDWR | O_NOCTTY);
    check(err_fd_ >= 0, "posix_openpt");
    check(::fcntl(err_fd_, F_SETFD, FD_CLOEXEC) == 0, "fcntl");
    check(::grantpt(err_fd_) == 0 && ::unlockpt(err_fd_) == 0, "grantpt");
    terminal_name = ::ptsname(err_fd_);
  } else {
    check(::pipe2(err_pipe, O_CLOEXEC) == 0, "pipe2");
    err_fd_ = err_pipe[0];
  }

  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  if (opts.stderr_on_terminal)
    ::posix_spawn_file_actions_addopen(&actions, 2, terminal_name.c_str(), O_RDWR | O_NOCTTY, 0);
  else
    ::posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);

  // The test runner may ignore or block signals; the child must see SIGINT as a user's Ctrl-C.
  posix_spawnattr_t attributes;
  ::posix_spawnattr_init(&attributes);
  sigset_t no_signals;
  sigemptyset(&no_signals);
  sigset_t default_signals;
  sigemptyset(&default_signals);
  sigaddset(&default_signals, SIGINT);
  sigaddset(&default_signals, SIGTERM);
  sigaddset(&default_signals, SIGPIPE);
  ::posix_spawnattr_setsigmask(&attributes, &no_signals);
  ::posix_spawnattr_setsigdefault(&attributes, &default_signals);
  ::posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  started_ = std::chrono::steady_clock::now();
  const int spawned = ::posix_spawn(&pid_, program.c_str(), &actions, &attributes, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attributes);
  ::close(out_pipe[1]);
  if (err_pipe[1] >= 0) ::close(err_pipe[1]);
  out_fd_ = out_pipe[0];
  if (spawned != 0) {
    errno = spawned;
    check(false, "posix_spawn");
  }
}

child_process::~child_process() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL); // only the child this object started
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

bool child_process::pump(std::chrono::steady_clock::time_point until) {
  while (out_fd_ >= 0 || err_fd_ >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return true;
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    const int ready = ::poll(fds, 2, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    check(ready >= 0, "poll");
    if (ready == 0) return true;
    const std::pair<int*, std::string*> streams[2] = {{&out_fd_, &out_}, {&err_fd_, &err_}};
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        streams[i].second->append(buffer, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) { // end of file; EIO from a terminal whose other side closed
        ::close(fds[i].fd);
        *streams[i].first = -1;
      }
    }
  }
  return false;
}

std::optional<std::string> child_process::read_line(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (out_.find('\n') == std::string::npos) {
    if (std::chrono::steady_clock::now() >= until) return std::nullopt;
    // Short slices, so that a line is returned as soon as it is complete.
    if (!pump(std::min(until, std::chrono::steady_clock::now() + 20ms)) && out_.find('\n') == std::string::npos)
      return std::nullopt;
  }
  const auto end = out_.find('\n');
  std::string line = out_.substr(0, end);
  out_.erase(0, end + 1);
  return line;
}

void child_process::send(int signal) {
  REQUIRE(pid_ > 0);
  ::kill(pid_, signal);
}

run_result child_process::finish(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  run_result result;
  pump(until);
  int status = 0;
  while (true) {
    const pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) break;
    if (std::chrono::steady_clock::now() >= until) {
      result.timed_out = true;
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  pid_ = -1;
  result.took = std::chrono::steady_clock::now() - started_;
  pump(std::chrono::steady_clock::now() + 100ms); // what it wrote just before exiting
  result.status = decode_wait_status(status);
  result.out = std::move(out_);
  result.err = std::move(err_);
  return result;
}

run_result run(const std::string& program, std::vector<std::string> args, std::chrono::milliseconds timeout) {
  child_process child(program, std::move(args));
  return child.finish(timeout);
}

listening_program::listening_program(const std::string& program, std::vector<std::string> args,
                                     std::chrono::milliseconds startup)
    : child_(program, std::move(args)) {
  const auto line = child_.read_line(startup);
  REQUIRE_MESSAGE(line, "no line on stdout within ", startup.count(), " ms");
  const std::string announcement = "listening on ";
  REQUIRE(line->starts_with(announcement));
  base_url_ = line->substr(announcement.size());
  REQUIRE_MESSAGE((base_url_.starts_with("http://") || base_url_.starts_with("https://")), "announced: ", *line);
}

unsigned short listening_program::port() const {
  return static_cast<unsigned short>(std::stoul(base_url_.substr(base_url_.rfind(':') + 1)));
}

run_result listening_program::stop(int signal, std::chrono::milliseconds timeout) {
  child_.send(signal);
  return child_.finish(timeout);
}

} // namespace coretry::test
