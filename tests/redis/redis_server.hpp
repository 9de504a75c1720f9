#ifndef CORETRY_TESTS_REDIS_REDIS_SERVER_HPP
#define CORETRY_TESTS_REDIS_REDIS_SERVER_HPP

// What the Redis tests share (tests/redis, and tests/bookstore's cases with
// --shared-state): a redis-server of their own on a free loopback port, a
// blocking RESP client to look at it, an io_context on a thread, bounded
// polling, and shared_state's options, observers and processes as the cases
// make them.

#include <eventually.hpp>
#include <skip.hpp>

#include <coretry/redis/shared_state.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <sys/types.h>

namespace redis_tests {

using namespace std::chrono_literals;

/// One RESP reply, as the test client reads it.
struct resp {
  char type = 0; ///< '+', '-', ':', '$', '*' ('$' with nil = true for a nil)
  bool nil = false;
  long long integer = 0;
  std::string text;
  std::vector<resp> elements;
};

/// Sends one command to 127.0.0.1:`port` on a fresh connection and reads
/// its reply within `timeout`; nullopt when that fails (nothing listens,
/// no answer in time).
std::optional<resp> send_command(std::uint16_t port, const std::vector<std::string>& args,
                                 std::chrono::milliseconds timeout = 2s);

/// Sends `commands` on one fresh connection and returns the last reply.
std::optional<resp> send_commands(std::uint16_t port, const std::vector<std::vector<std::string>>& commands,
                                  std::chrono::milliseconds timeout = 2s);

/// A loopback port nothing listened on a moment ago.
std::uint16_t free_port();

/// Whether /usr/bin/redis-server is there.
bool redis_installed();

/// A redis-server of the test's own on 127.0.0.1, without persistence.
/// Stopped (SIGTERM, then SIGKILL after 5 s) when destroyed.
class redis_server {
public:
  struct options {
    std::string password{}; ///< --requirepass when not empty
    /// Also a TLS port (tls_port()), with a CA and certificates made for
    /// this server (ca_file(); the server's names: 127.0.0.1, localhost).
    /// The plain port stays, for the test's own commands.
    bool tls = false;
    /// TLS clients must present a certificate signed by the CA
    /// (client_cert_file(), client_key_file()).
    bool tls_auth_clients = false;
    /// The server's certificate names another host (not 127.0.0.1).
    bool tls_wrong_name = false;
    /// An ACL user with every right (ACL SETUSER, never on a command line);
    /// the default user is then turned off, and the test's commands log in
    /// as this user.
    std::string acl_user{}, acl_password{};
  };
  /// Starts it and waits until it answers PING. Throws when it cannot
  /// (check redis_installed() first).
  explicit redis_server(options opts);
  redis_server() : redis_server(options{}) {}
  ~redis_server();
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;

  std::uint16_t port() const { return port_; }
  /// The TLS port (options::tls), 0 without.
  std::uint16_t tls_port() const { return tls_port_; }
  std::string url() const;
  /// The files of options::tls (in a directory removed with the server).
  std::string ca_file() const { return dir_ + "/ca.pem"; }
  std::string client_cert_file() const { return dir_ + "/client.pem"; }
  std::string client_key_file() const { return dir_ + "/client.key"; }
  /// A command on a fresh connection (with AUTH when there is a password).
  std::optional<resp> command(const std::vector<std::string>& args) const;

  void kill();    ///< SIGKILL, and reaped
  void pause();   ///< SIGSTOP
  void resume();  ///< SIGCONT
  /// Starts it again, empty, on the same port (after kill()).
  void restart();

private:
  void spawn();
  bool answers(std::chrono::milliseconds within);
  void reap(std::chrono::milliseconds within);
  void make_certificates();
  void add_acl_user();
  options opts_;
  std::uint16_t port_ = 0, tls_port_ = 0;
  std::string dir_; ///< the certificates, with options::tls
  pid_t pid_ = -1;
};

/// An io_context run by one thread until destroyed (or stop()).
class io_thread {
public:
  io_thread();
  ~io_thread();
  io_thread(const io_thread&) = delete;
  io_thread& operator=(const io_thread&) = delete;
  boost::asio::io_context& context() { return io_; }
  boost::asio::any_io_executor executor() { return io_.get_executor(); }
  /// Stops the io_context and joins the thread (the io_context lives on).
  void stop();

private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::thread thread_;
};

using coretry::test::eventually;

/// This process's peak resident set (VmHWM), in KiB.
long peak_rss_kib();

/// What on_problem was told, in order (called on the reconciler's thread).
class problems {
public:
  std::function<void(std::string_view)> callback() {
    auto self = state_;
    return [self](std::string_view message) {
      std::lock_guard lock(self->mutex);
      self->messages.emplace_back(message);
    };
  }
  std::vector<std::string> all() const {
    std::lock_guard lock(state_->mutex);
    return state_->messages;
  }
  std::size_t size() const { return all().size(); }

private:
  struct state {
    mutable std::mutex mutex;
    std::vector<std::string> messages;
  };
  std::shared_ptr<state> state_ = std::make_shared<state>();
};

/// A process `id` of a fleet on 127.0.0.1:`port`, exchanging every `period`
/// and reconnecting quickly.
inline coretry::redis::shared_state::options fleet_options(std::uint16_t port, std::string id,
                                                           coretry::duration period = std::chrono::milliseconds(50)) {
  coretry::redis::shared_state::options o;
  o.server.host = "127.0.0.1";
  o.server.port = port;
  o.process_id = std::move(id);
  o.period = period;
  o.reconnect = coretry::backoff_policy{std::chrono::milliseconds(20), 2.0, std::chrono::milliseconds(200),
                                        coretry::jitter_kind::full};
  return o;
}

/// A process `id` of a fleet on `server`: fleet_options() on its TLS port
/// with `rediss`, its CA file trusted (and its client certificate with
/// options::tls_auth_clients), else on its plain port.
coretry::redis::shared_state::options fleet_options(const redis_server& server, std::string id, bool rediss,
                                                    coretry::duration period = std::chrono::milliseconds(50));

/// Runs the calling test case twice, in a doctest subcase each: over plain
/// TCP, then over TLS. Whether this run is the TLS one.
inline bool tls_subcase() {
  bool tls = false;
  SUBCASE("over plain TCP") {}
  SUBCASE("over TLS") { tls = true; }
  return tls;
}

/// The budget the cases give their dependency, "pricing": a bucket of 20
/// tokens, 0.1 per initial request, leased 5 at a time.
inline coretry::leased_budget::options pricing_budget() { return {20.0, 0.1, 5}; }

/// One process of a fleet as most cases make it: a shared_state on an
/// io_context thread of its own, telling its problems to `told`, with
/// pricing_budget() for "pricing".
struct fleet_process {
  /// Makes it with `o` (on_problem set to tell `told`), and starts it unless
  /// `start` is false.
  explicit fleet_process(coretry::redis::shared_state::options o, bool start = true);

  io_thread io;
  problems told;
  coretry::redis::shared_state state;
  std::shared_ptr<coretry::leased_budget> budget;
};

inline coretry::duration steady_now() { return std::chrono::steady_clock::now().time_since_epoch(); }

using milliseconds_d = std::chrono::duration<double, std::milli>;

inline double since_ms(std::chrono::steady_clock::time_point t0) {
  return milliseconds_d(std::chrono::steady_clock::now() - t0).count();
}

} // namespace redis_tests

/// Starts `server` (a std::optional<redis_tests::redis_server>) with
/// `options`, or skips the test when redis-server is not installed.
#define REDIS_SERVER_OR_SKIP(server, ...)                                                   \
  std::optional<redis_tests::redis_server> server;                                          \
  if (!redis_tests::redis_installed()) {                                                    \
    coretry::test::skip_test("no /usr/bin/redis-server");                                   \
    return;                                                                                 \
  }                                                                                         \
  server.emplace(__VA_ARGS__)

#endif
