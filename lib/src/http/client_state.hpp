#ifndef CORETRY_SRC_HTTP_CLIENT_STATE_HPP
#define CORETRY_SRC_HTTP_CLIENT_STATE_HPP

// What a client shares with its requests and their attempts: options, pool,
// address health, TLS context, proxy. Internal to coretry::http.

#include <coretry/http/client_options.hpp>
#include <coretry/http/url.hpp>
#include <coretry/http/proxy.hpp>

#include "address_health.hpp"
#include "connect.hpp"
#include "pool.hpp"
#include "prepare.hpp"

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace coretry::http::detail {

/// `o` when it makes sense; throws std::invalid_argument naming the problem.
client_options checked(client_options o);
/// client_options::resolve as pins in `health`.
void pin_names(const client_options& o, address_health& health);
/// client_options::proxy read, or null without one.
std::shared_ptr<const proxy_route> route_of(const std::string& proxy);

struct client_state {
  client_state(boost::asio::any_io_executor ex, client_options o)
      : executor(std::move(ex)), options(checked(std::move(o))),
        pool(executor, options.max_connections_per_origin, options.pool_idle_timeout),
        health(options.lookup_ttl, options.ejection, options.connection_attempt_delay, options.balance), tls(options), proxy(route_of(options.proxy)) {
    pin_names(options, health);
    if (!options.ca_file.empty() || !options.certificate_file.empty()) {
      // A client given a CA file or a client certificate speaks HTTPS: its
      // TLS context is made now, so that a bad file is a clear error at
      // construction (not a handshake failure on every attempt later) and
      // loading the trust stores is not charged to the first request's
      // deadline.
      try {
        tls.get();
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("coretry::http: " + std::string(e.what()));
      } catch (const boost::system::system_error& e) {
        // The file changed between the check and the load, or the system's
        // trust stores failed: still bad input, not an internal error.
        throw std::invalid_argument("coretry::http: the TLS context could not be made: " + std::string(e.what()));
      }
    }
  }

  /// `url` read strictly (parse_url), or the parts of the last URL read
  /// when it is the same text: a client sends to the same URL again and
  /// again, and reading one costs more than comparing it.
  url_parts parts_of(std::string_view url) {
    {
      std::lock_guard lock(last_url_mutex);
      if (remembered && url == last_url) return last_parts;
    }
    url_parts parts = parse_url(url); // throws on a bad URL, which is not kept
    if (url.size() <= max_remembered_url) {
      std::lock_guard lock(last_url_mutex);
      last_url.assign(url); // reuses the text's capacity
      last_parts = parts;
      remembered = true;
    }
    return parts;
  }

  /// The names of the origin of `parts` (names_of): the same shared ones
  /// while requests go to the same origin as the one before.
  std::shared_ptr<const origin_names> names_for(const url_parts& parts) {
    std::lock_guard lock(last_url_mutex);
    if (!last_names || last_names_tls != parts.tls || last_names_port != parts.port ||
        last_names_explicit_port != parts.explicit_port || last_names_host != parts.host) {
      last_names = std::make_shared<const origin_names>(names_of(parts));
      last_names_tls = parts.tls;
      last_names_port = parts.port;
      last_names_explicit_port = parts.explicit_port;
      last_names_host = parts.host;
    }
    return last_names;
  }

  boost::asio::any_io_executor executor;
  client_options options;
  connection_pool pool;
  address_health health;
  tls_context tls;
  /// The proxy, null without one.
  std::shared_ptr<const proxy_route> proxy;

  /// The proxy requests to `host` go through, null for none.
  std::shared_ptr<const proxy_route> proxy_for(const std::string& host) const {
    if (!proxy || bypasses_proxy(options.no_proxy, host)) return nullptr;
    return proxy;
  }

private:
  static constexpr std::size_t max_remembered_url = 2048;
  std::mutex last_url_mutex;
  std::string last_url;
  url_parts last_parts;
  bool remembered = false;
  std::shared_ptr<const origin_names> last_names;
  bool last_names_tls = false;
  std::uint16_t last_names_port = 0;
  bool last_names_explicit_port = false;
  std::string last_names_host;
};

} // namespace coretry::http::detail

#endif
