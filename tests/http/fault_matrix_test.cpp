// Every fault kind the fault server offers, crossed with GET, POST and POST
// with an idempotency key: the stop reason, the attempt count, the key kept
// across attempts, the pool back to zero leased, and no socket left open.

#include <coretry/http/client.hpp>
#include <faults/fault_server.hpp>

#include "blocking_client.hpp"
#include "open_sockets.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <doctest/doctest.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using namespace std::chrono_literals;
using coretry::stop_reason;

namespace {

enum class method { get, post, keyed_post };

const char* name(method m) {
  switch (m) {
  case method::get: return "GET";
  case method::post: return "POST";
  case method::keyed_post: return "POST with Idempotency-Key";
  }
  return "?";
}

struct expectation {
  stop_reason reason;
  unsigned attempts;
};

/// A directory of this run's own under the system temporary directory
/// (mkdtemp: a fresh name, mode 0700), removed with its contents at the end
/// of the scope, however the test leaves it. Two runs never share a file.
class run_directory {
public:
  run_directory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "coretry-matrix-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    path_ = pattern;
  }
  ~run_directory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  run_directory(const run_directory&) = delete;
  run_directory& operator=(const run_directory&) = delete;
  const std::filesystem::path& path() const { return path_; }

private:
  std::filesystem::path path_;
};

struct fault_row {
  const char* fault;    ///< path and query on the plain server, or a special target
  expectation get;      ///< GET
  expectation post;     ///< POST without a key
  expectation keyed;    ///< POST with a key
};

} // namespace

TEST_CASE("fault matrix: every fault kind against GET, POST and POST with a key") {
  constexpr auto ok = stop_reason::succeeded;
  constexpr auto rejected = stop_reason::rejected;
  constexpr auto exhausted = stop_reason::attempts_exhausted;
  constexpr auto unknown = stop_reason::outcome_unknown;
  constexpr auto too_long = stop_reason::server_delay_too_long;
  // Policy below: 3 attempts, 5 s overall, 400 ms per attempt: generous, so
  // that even a slow (sanitized) build connects and writes well inside an
  // attempt, and only the server's own faults decide the outcome.
  const std::vector<fault_row> rows = {
      {"/status/200", {ok, 1}, {ok, 1}, {ok, 1}},
      {"/status/404", {rejected, 1}, {rejected, 1}, {rejected, 1}},
      {"/status/400?body=%7B%22missing%22%3A%5B%22email%22%5D%7D", {rejected, 1}, {rejected, 1}, {rejected, 1}},
      // A definite 503 to an unkeyed POST is a rejection: not safe to repeat.
      {"/status/503", {exhausted, 3}, {rejected, 1}, {exhausted, 3}},
      {"/status/502", {exhausted, 3}, {rejected, 1}, {exhausted, 3}},
      {"/status/429?retry-after=0", {exhausted, 3}, {rejected, 1}, {exhausted, 3}},
      {"/status/503?retry-after=abc", {exhausted, 3}, {rejected, 1}, {exhausted, 3}}, // invalid: local policy
      {"/status/503?retry-after=10", {too_long, 1}, {rejected, 1}, {too_long, 1}},
      {"/status/503?retry-after-date=%2B10", {too_long, 1}, {rejected, 1}, {too_long, 1}},
      {"/seq/{id}?steps=503;retry-after-date=-5,200", {ok, 2}, {rejected, 1}, {ok, 2}}, // a past date: no extra wait
      // Timeouts after the request was sent: ambiguous for an unkeyed POST.
      {"/status/200?delay=1500", {exhausted, 3}, {unknown, 1}, {exhausted, 3}},
      {"/status/200?drip=100:40", {exhausted, 3}, {unknown, 1}, {exhausted, 3}},
      {"/status/200?hang-after-headers", {exhausted, 3}, {unknown, 1}, {exhausted, 3}},
      {"/status/200?close", {exhausted, 3}, {unknown, 1}, {exhausted, 3}},
      {"/status/200?reset", {exhausted, 3}, {unknown, 1}, {exhausted, 3}},
      {"/seq/{id}?steps=close,502,200", {ok, 3}, {unknown, 1}, {ok, 3}},
      // Never reached a server: safe to repeat whatever the method.
      {"refused", {exhausted, 3}, {exhausted, 3}, {exhausted, 3}},
      // A certificate the client cannot trust: permanent.
      {"tls-untrusted", {rejected, 1}, {rejected, 1}, {rejected, 1}},
  };

  const std::size_t sockets_before = coretry_tests::open_sockets();
  {
    asio::io_context server_io(1);
    auto guard = asio::make_work_guard(server_io);
    coretry::faults::fault_server plain(server_io);
    coretry::faults::pki_options untrusted;
    untrusted.signed_by_ca = false;
    coretry::faults::fault_server_options tls_options;
    tls_options.tls = true;
    tls_options.pki = coretry::faults::generate_test_pki(untrusted);
    coretry::faults::fault_server tls(server_io, tls_options);
    const run_directory scratch;
    const std::string ca_file = scratch.path() / "ca.pem";
    {
      std::ofstream out(ca_file);
      out << tls.ca_certificate_pem();
      out.flush();
      REQUIRE(out.good());
    }
    std::thread server_thread([&] { server_io.run(); });
    unsigned short refused_port;
    {
      asio::ip::tcp::acceptor probe(server_io, {asio::ip::make_address("127.0.0.1"), 0});
      refused_port = probe.local_endpoint().port();
    }

    coretry::http::client_options client_options;
    client_options.ca_file = ca_file;
    coretry_tests::blocking_client h{client_options};
    int sequence = 0;

    for (const fault_row& row : rows) {
      for (method m : {method::get, method::post, method::keyed_post}) {
        std::string target = row.fault;
        if (const auto id = target.find("{id}"); id != std::string::npos)
          target.replace(id, 4, "m" + std::to_string(++sequence)); // a fresh sequence per case
        std::string url = plain.base_url() + target;
        if (target == "refused") url = "http://127.0.0.1:" + std::to_string(refused_port) + "/orders";
        if (target == "tls-untrusted") url = "https://localhost:" + std::to_string(tls.port()) + "/status/200";
        const expectation want = m == method::get ? row.get : m == method::post ? row.post : row.keyed;
        const std::string fault = row.fault, method_name = name(m);
        CAPTURE(fault);
        CAPTURE(method_name);

        coretry::http::request_options options;
        options.policy = {.overall_deadline = 5s, .attempt_limit = 400ms, .min_attempt_allowance = 50ms,
                          .completion_reserve = 10ms, .backoff = {.initial_window = 10ms, .max_window = 20ms},
                          .server_delay_spread = 5ms};
        options.generate_idempotency_key = m == method::keyed_post;
        plain.clear();

        const bool get = m == method::get;
        const coretry::http::result result =
            h.send(get ? beast_http::verb::get : beast_http::verb::post, url, options, get ? "" : "{\"order\":1}");
        CHECK(result.reason == want.reason);
        CHECK(result.attempts == want.attempts);
        CHECK(h.client.stats().leased == 0);
        if (m == method::keyed_post) {
          // Every attempt that reached the server carried the same key.
          std::optional<std::string> key;
          for (const auto& logged : plain.log()) {
            REQUIRE(logged.idempotency_key);
            if (key) CHECK(*logged.idempotency_key == *key);
            key = logged.idempotency_key;
          }
        }
      }
    }
    h.client.close_idle();
    plain.stop();
    tls.stop();
    guard.reset();
    server_thread.join();
  }
  CHECK(coretry_tests::open_sockets() == sockets_before);
}
