// rediss://: coretry::redis::shared_state over TLS against a redis-server of
// the test's own with a TLS port and certificates made for it, and what a TLS
// failure looks like.

#include "redis_server.hpp"

#include <coretry/redis/shared_state.hpp>
#include <coretry/redis/url.hpp>

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace redis_tests;
using coretry::redis::shared_state;

namespace {

// What a process was told after a second of failed reconnections: a TLS
// failure is told once, whatever the retries (`kinds`: how many different
// messages the failure may show as).
std::vector<std::string> told_after_retries(fleet_process& p, std::size_t kinds) {
  REQUIRE(eventually([&] { return p.told.size() >= 1; }, std::chrono::seconds(5)));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const auto messages = p.told.all();
  for (const auto& m : messages) MESSAGE("told: " << m);
  CHECK(messages.size() >= 1);
  CHECK(messages.size() <= kinds);
  CHECK_FALSE(p.state.up());
  CHECK(p.state.exchanges() == 0);
  CHECK(p.state.fallbacks() == 1);
  CHECK_FALSE(p.budget->shared());
  return messages;
}

std::string told_once(fleet_process& p) {
  const auto messages = told_after_retries(p, 1);
  return messages.empty() ? std::string() : messages.front();
}

} // namespace

TEST_CASE("redis: rediss:// shares through the TLS port, with a client certificate when asked for one") {
  REDIS_SERVER_OR_SKIP(server, redis_server::options{.tls = true, .tls_auth_clients = true});
  fleet_process p{fleet_options(*server, "secure", true)};
  REQUIRE(eventually([&] { return p.state.up() && p.budget->leased() == 5; }));
  CHECK(p.state.fallbacks() == 0);
  CHECK(p.told.size() == 0);
  const auto key = server->command({"EXISTS", p.state.key_prefix("pricing") + "state"});
  REQUIRE(key);
  CHECK(key->integer == 1);
  // The server counts the connection among its TLS ones... by refusing a
  // plain one on the same port.
  fleet_process plain{fleet_options(server->tls_port(), "plain")};
  const std::string message = told_once(plain);
  CHECK_FALSE(message.empty());
}

TEST_CASE("redis: a TLS failure is told once, by its reason, and the process stays local") {
  SUBCASE("a server certificate no trusted CA signed") {
    REDIS_SERVER_OR_SKIP(server, redis_server::options{.tls = true});
    auto o = fleet_options(*server, "untrusting", true);
    o.tls.ca_file.clear();
    fleet_process p{o};
    const std::string message = told_once(p);
    CHECK(message.find("TLS handshake failed") != std::string::npos);
    CHECK(message.find("certificate verify failed") != std::string::npos);
    CHECK(message.find(": self-signed certificate in certificate chain") != std::string::npos);
  }
  SUBCASE("a server certificate for another host") {
    REDIS_SERVER_OR_SKIP(server, redis_server::options{.tls = true, .tls_wrong_name = true});
    fleet_process p{fleet_options(*server, "suspicious", true)};
    const std::string message = told_once(p);
    CHECK(message.find("TLS handshake failed") != std::string::npos);
    CHECK(message.find(": IP address mismatch") != std::string::npos);
  }
  SUBCASE("no client certificate for a server that asks for one") {
    REDIS_SERVER_OR_SKIP(server, redis_server::options{.tls = true, .tls_auth_clients = true});
    auto o = fleet_options(*server, "anonymous", true);
    o.tls.cert_file.clear();
    o.tls.key_file.clear();
    fleet_process p{o};
    // TLS 1.3 tells the client after its handshake, at its first read: by
    // an alert, or by the reset that follows it when the server closes on
    // the client's first command.
    const auto messages = told_after_retries(p, 2);
    for (const auto& message : messages)
      CHECK((message == "Redis TLS failed: tlsv13 alert certificate required (SSL routines)" ||
             message == "Redis unreachable: Connection reset by peer"));
  }
  SUBCASE("a server that does not speak TLS") {
    REDIS_SERVER_OR_SKIP(server, redis_server::options{.tls = true});
    auto o = fleet_options(*server, "mistaken", true);
    o.server.port = server->port();
    fleet_process p{o};
    const std::string message = told_once(p);
    CHECK(message.find("TLS handshake") != std::string::npos);
  }
}

TEST_CASE("redis: TLS files that cannot serve are refused when the shared_state is made, naming the file") {
  REDIS_SERVER_OR_SKIP(server, redis_server::options{.tls = true});
  boost::asio::io_context io;
  const auto refused = [&](coretry::redis::shared_state::options o) -> std::string {
    try {
      shared_state s(io.get_executor(), std::move(o));
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    FAIL("accepted");
    return {};
  };
  auto o = fleet_options(*server, "careful", true);
  o.tls.ca_file = "/nonexistent/ca.pem";
  CHECK(refused(o).find("/nonexistent/ca.pem") != std::string::npos);
  o = fleet_options(*server, "careful", true);
  o.tls.ca_file = server->client_key_file(); // a key, no certificate
  CHECK(refused(o).find("no usable PEM certificate") != std::string::npos);
  o = fleet_options(*server, "careful", true);
  o.tls.key_file.clear();
  CHECK(refused(o).find("needs its key") != std::string::npos);
  o = fleet_options(*server, "careful", true);
  o.tls.cert_file.clear();
  CHECK(refused(o).find("needs its certificate") != std::string::npos);
  o = fleet_options(*server, "careful", true);
  o.tls.key_file = server->ca_file(); // a certificate, no key
  CHECK(refused(o).find(server->ca_file()) != std::string::npos);
  o = fleet_options(*server, "careful", true);
  o.tls.cert_file = server->ca_file(); // not the key's certificate
  const std::string mismatch = refused(o);
  CHECK(mismatch.find(server->client_key_file()) != std::string::npos);
  CHECK(mismatch.find("the certificate '" + server->ca_file() + "'") != std::string::npos);
  // A plain server takes no TLS setting, a key's password included.
  o = fleet_options(server->port(), "careful");
  o.tls.key_password = "secret";
  CHECK(refused(o).find("TLS files are for a rediss:// server") != std::string::npos);
  o = fleet_options(*server, "careful", false);
  o.tls.ca_file = server->ca_file();
  CHECK(refused(o).find("rediss://") != std::string::npos);
}
