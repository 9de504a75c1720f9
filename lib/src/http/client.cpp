#include <coretry/http/client.hpp>

#include <coretry/detail/attempt_runner.hpp>
#include <coretry/http/redact.hpp>

#include "response_reading.hpp"
#include "streamed_body.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/url/parse.hpp>
#include <boost/uuid/random_generator.hpp>
#include <boost/uuid/uuid_io.hpp>

#include <openssl/ssl.h>

#include <algorithm>
#include <charconv>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <variant>

#include <sys/socket.h>
#include <unistd.h>

namespace coretry::http {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace beast_http = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

[[noreturn]] void refuse_url(std::string_view url, const std::string& problem) {
  throw std::invalid_argument("coretry::http: " + problem + ": " + redact_url(url));
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/// Percent-decodes `text`; nullopt for a malformed escape.
std::optional<std::string> percent_decoded(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int high = hex_value(text[i + 1]);
    const int low = hex_value(text[i + 2]);
    if (high < 0 || low < 0) return std::nullopt;
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

/// A DNS name (letters, digits, '-', '_', dots between non-empty labels of
/// at most 63 characters, 253 in all, one final dot allowed) or an IPv4
/// address, which has the same shape.
bool is_dns_name(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (name.empty() || name.size() > 253) return false;
  std::size_t label = 0;
  for (const char c : name) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!allowed || ++label > 63) return false;
  }
  return label != 0;
}

std::string base64(std::string_view bytes) {
  static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t group = 0;
    for (std::size_t k = 0; k < 3; ++k)
      group = (group << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) out += k <= n ? alphabet[(group >> (18 - 6 * k)) & 0x3f] : '=';
  }
  return out;
}

} // namespace

url_parts parse_url(std::string_view url) {
  // Boost.URL checks the URL's grammar and scheme; the authority is then
  // read from the text itself, so that what is looked up is what it says.
  auto parsed = boost::urls::parse_uri(url);
  if (!parsed) throw std::invalid_argument("coretry::http: not an absolute URL: " + redact_url(url));
  const auto scheme = parsed->scheme_id();
  if (scheme != boost::urls::scheme::http && scheme != boost::urls::scheme::https)
    throw std::invalid_argument("coretry::http: URL scheme must be http or https, not '" +
                                std::string(parsed->scheme()) + "'");
  url_parts parts;
  parts.tls = scheme == boost::urls::scheme::https;
  std::string_view rest = url.substr(parsed->scheme().size() + 1);
  if (rest.substr(0, 2) != "//") refuse_url(url, "URL has no host");
  rest.remove_prefix(2);
  const std::size_t authority_end = std::min(rest.find_first_of("/?#"), rest.size());
  std::string_view authority = rest.substr(0, authority_end);
  rest.remove_prefix(authority_end);

  if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = authority.substr(0, at);
    authority.remove_prefix(at + 1);
    const std::size_t colon = userinfo.find(':');
    auto user = percent_decoded(userinfo.substr(0, colon));
    auto password = percent_decoded(colon == std::string_view::npos ? std::string_view{} : userinfo.substr(colon + 1));
    if (!user || !password) refuse_url(url, "URL userinfo has a malformed percent escape");
    if (!userinfo.empty()) {
      parts.user = std::move(*user);
      parts.password = std::move(*password);
    }
  }

  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) refuse_url(url, "URL has an unterminated IPv6 address");
    const std::string_view inside = authority.substr(1, close - 1);
    if (inside.find('%') != std::string_view::npos) refuse_url(url, "URL IPv6 zone identifiers are not supported");
    error_code ec;
    const auto address = asio::ip::make_address_v6(std::string(inside), ec);
    if (ec) refuse_url(url, "URL host is not a valid IPv6 address");
    parts.host = address.to_string();
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':') refuse_url(url, "URL has characters after its IPv6 address");
    if (!after.empty()) port_text = after.substr(1);
    if (!after.empty()) parts.explicit_port = true;
  } else {
    const std::size_t colon = authority.find(':');
    const std::string_view host_text = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      parts.explicit_port = true;
    }
    if (host_text.empty()) refuse_url(url, "URL has no host");
    const auto host = percent_decoded(host_text);
    if (!host || !is_dns_name(*host))
      refuse_url(url, "URL host is not a DNS name or an IP address (percent escapes included)");
    parts.host = *host;
    std::transform(parts.host.begin(), parts.host.end(), parts.host.begin(),
                   [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
  }
  if (port_text.empty()) {
    parts.explicit_port = false;
    parts.port = parts.tls ? 443 : 80;
  } else {
    unsigned port = 0;
    const char* const end = port_text.data() + port_text.size();
    const auto [stop, problem] = std::from_chars(port_text.data(), end, port);
    if (problem != std::errc{} || stop != end || port == 0 || port > 65535 || port_text.size() > 5)
      refuse_url(url, "URL port must be a number from 1 to 65535");
    parts.port = static_cast<std::uint16_t>(port);
  }

  const std::string_view path_and_query = rest.substr(0, rest.find('#'));
  if (!path_and_query.empty() && path_and_query.front() != '/' && path_and_query.front() != '?')
    refuse_url(url, "URL path must begin with '/'");
  parts.target = path_and_query.empty() || path_and_query.front() == '?' ? "/" : "";
  parts.target += path_and_query;
  return parts;
}

namespace detail {

struct origin {
  bool tls = false;
  std::string host;
  std::string port;
  std::string key; // "https://host:port": the pool's key
};

/// RFC 9110 §5.6.2: a token, as method and field names must be.
bool is_token(std::string_view text) {
  static constexpr std::string_view specials = "!#$%&'*+-.^_`|~";
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           specials.find(c) != std::string_view::npos;
  });
}

/// Text safe to quote in an error message: control and non-ASCII bytes as \xNN.
std::string printable(std::string_view text) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (const char c : text.substr(0, 64)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += digits[byte >> 4];
      out += digits[byte & 0xf];
    }
  }
  return text.size() > 64 ? out + "..." : out;
}

/// What would make the request something other than what it says, or more
/// than one request: a method or header name that is not a token, a header
/// value with CR, LF, NUL or another control character (a tab is allowed),
/// a target with a space or control character, Content-Length together with
/// Transfer-Encoding (RFC 9112 §6.1: the framing would be ambiguous).
/// Checked on the prepared request and again on each decorated copy.
std::optional<std::string> request_problem(const request& req) {
  if (!is_token(req.method_string()))
    return "the method '" + printable(req.method_string()) + "' is not a token";
  const std::string_view target = req.target();
  if (std::any_of(target.begin(), target.end(),
                  [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == '\x7f'; }))
    return "the request target contains a space, CR, LF or control character";
  for (const auto& field : req) {
    if (!is_token(field.name_string()))
      return "the header name '" + printable(field.name_string()) + "' is not a token";
    const std::string_view value = field.value();
    if (std::any_of(value.begin(), value.end(),
                    [](char c) { return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == '\x7f'; }))
      return "header '" + std::string(field.name_string()) + "' has a value with CR, LF, NUL or a control character";
  }
  if (req.find(beast_http::field::content_length) != req.end() &&
      req.find(beast_http::field::transfer_encoding) != req.end())
    return "the request has both Content-Length and Transfer-Encoding";
  return std::nullopt;
}

struct prepared_request {
  origin where;
  request req;
  std::function<std::optional<std::string>(unsigned)> body;
  std::function<void(request&, const attempt_context<std::chrono::steady_clock>&)> decorate;
  std::function<std::optional<std::string>(const response&)> validate;
  std::vector<classifier_extension> classifiers;
  body_streaming streaming; ///< empty unless the caller takes bodies piece by piece
  bool repeatable = false; ///< idempotent or keyed: may be sent again after an ambiguous failure
};

/// The errors of a connection the server had closed before the request.
bool closed_by_peer(const error_code& ec) {
  return ec == asio::error::eof || ec == beast_http::error::end_of_stream || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == ssl::error::stream_truncated;
}

/// A connection: plain TCP or TLS over TCP, with its read buffer (which may
/// hold bytes of the next response only if the server misbehaved).
struct connection {
  explicit connection(tcp::socket socket) : stream(std::in_place_type<tcp::socket>, std::move(socket)) {}
  connection(tcp::socket socket, ssl::context& tls)
      : stream(std::in_place_type<ssl::stream<tcp::socket>>, std::move(socket), tls) {}

  tcp::socket& socket() {
    if (auto* plain = std::get_if<tcp::socket>(&stream)) return *plain;
    return std::get<ssl::stream<tcp::socket>>(stream).next_layer();
  }

  /// True when the server closed an idle connection or sent bytes nobody
  /// asked for (a 408, a body after a HEAD response, an early answer):
  /// checked without blocking before the connection is reused, whatever the
  /// request's method. Such bytes must never be read as the answer to a
  /// request written after them.
  bool is_stale() {
    if (auto* tls = std::get_if<ssl::stream<tcp::socket>>(&stream)) {
      // Records the TLS layer already took off the socket, decrypted or not.
      SSL* native = tls->native_handle();
      if (SSL_pending(native) > 0 || BIO_ctrl_pending(SSL_get_rbio(native)) > 0) return true;
    }
    char byte;
    const ssize_t n = ::recv(socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0) return !(errno == EAGAIN || errno == EWOULDBLOCK);
    return true; // 0: orderly close; > 0: unsolicited data
  }

  void close() {
    error_code ignored;
    socket().shutdown(tcp::socket::shutdown_both, ignored);
    socket().close(ignored);
  }

  std::variant<tcp::socket, ssl::stream<tcp::socket>> stream;
  beast::flat_buffer buffer;
  std::chrono::steady_clock::time_point idle_since{};
};

class connection_pool;

/// A leased connection or, with no connection, a permit to open one. Given
/// back on destruction: pooled when the exchange ended cleanly, else closed.
class lease {
public:
  lease(connection_pool* pool, std::string key, std::unique_ptr<connection> conn)
      : pool_(pool), key_(std::move(key)), conn_(std::move(conn)) {}
  lease(lease&& other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)), key_(std::move(other.key_)), conn_(std::move(other.conn_)),
        reusable_(other.reusable_) {}
  lease& operator=(lease&&) = delete;
  ~lease();

  connection* get() const noexcept { return conn_.get(); }
  void attach(std::unique_ptr<connection> conn) { conn_ = std::move(conn); }
  void mark_reusable() noexcept { reusable_ = true; }

private:
  connection_pool* pool_;
  std::string key_;
  std::unique_ptr<connection> conn_;
  bool reusable_ = false;
};

class connection_pool {
public:
  connection_pool(asio::any_io_executor ex, std::size_t max_per_origin, duration idle_timeout)
      : executor_(std::move(ex)), max_per_origin_(max_per_origin), idle_timeout_(idle_timeout) {}

  ~connection_pool() {
    std::lock_guard lock(mutex_);
    for (auto& [key, o] : origins_)
      for (auto& conn : o.idle) conn->close();
  }

  /// A lease now, if a connection or a permit is free. An idle connection is
  /// looked at before it is handed out (one system call): one the server
  /// closed, or that holds bytes nobody asked for, is closed instead.
  std::optional<lease> try_lease(const std::string& key) {
    std::lock_guard lock(mutex_);
    per_origin& o = origins_[key];
    const auto now = std::chrono::steady_clock::now();
    while (!o.idle.empty()) {
      std::unique_ptr<connection> conn = std::move(o.idle.back());
      o.idle.pop_back();
      if (now - conn->idle_since <= idle_timeout_ && !conn->is_stale()) {
        ++o.leased;
        return lease(this, key, std::move(conn));
      }
      ++stale_discarded_;
      conn->close();
    }
    if (o.leased + o.idle.size() < max_per_origin_) {
      ++o.leased;
      return lease(this, key, nullptr);
    }
    return std::nullopt;
  }

  /// Waits until a connection of `key` is given back (then try_lease again).
  /// Honours per-operation cancellation of every kind.
  template <class Token>
  auto async_wait_for_release(const std::string& key, Token&& token) {
    return asio::async_initiate<Token, void(error_code)>(
        [this, key](auto handler) {
          add_waiter(key, asio::any_completion_handler<void(error_code)>(std::move(handler)));
        },
        token);
  }

  void give_back(const std::string& key, std::unique_ptr<connection> conn, bool reusable) {
    std::unique_ptr<waiter> woken;
    {
      std::lock_guard lock(mutex_);
      per_origin& o = origins_[key];
      --o.leased;
      const auto now = std::chrono::steady_clock::now();
      if (conn && reusable) {
        conn->idle_since = now;
        o.idle.push_back(std::move(conn));
      } else if (conn) {
        conn->close();
      }
      if (!o.waiters.empty()) {
        woken = std::move(o.waiters.front());
        o.waiters.pop_front();
      }
      close_expired(now);
    }
    if (woken) wake(std::move(woken), {});
  }

  void note_opened() {
    std::lock_guard lock(mutex_);
    ++opened_;
  }

  void note_lookup() {
    std::lock_guard lock(mutex_);
    ++lookups_;
  }

  pool_stats stats() const {
    std::lock_guard lock(mutex_);
    pool_stats s;
    for (const auto& [key, o] : origins_) {
      s.idle += o.idle.size();
      s.leased += o.leased;
      s.waiting += o.waiters.size();
    }
    s.open = s.idle + s.leased;
    s.connections_opened = opened_;
    s.stale_discarded = stale_discarded_;
    s.lookups = lookups_;
    return s;
  }

  /// A reused connection turned out to have been closed by the server.
  void note_stale() {
    std::lock_guard lock(mutex_);
    ++stale_discarded_;
  }

  void close_idle() {
    std::lock_guard lock(mutex_);
    for (auto& [key, o] : origins_) {
      for (auto& conn : o.idle) conn->close();
      o.idle.clear();
    }
  }

private:
  struct waiter {
    // Built, never assigned: Boost 1.81's any_completion_handler move
    // assignment re-wraps the handler in itself; its move constructor is sound.
    waiter(std::uint64_t i, asio::any_completion_handler<void(error_code)>&& h) : id(i), handler(std::move(h)) {}
    std::uint64_t id;
    asio::any_completion_handler<void(error_code)> handler;
  };

  struct per_origin {
    std::vector<std::unique_ptr<connection>> idle;
    std::size_t leased = 0;
    std::deque<std::unique_ptr<waiter>> waiters;
  };

  /// At most once per idle timeout, closes the idle connections that are
  /// past it, whatever their origin, and forgets origins left with nothing:
  /// a client that talks to many hosts once each would otherwise keep their
  /// sockets (and the server's half-closed ends) forever. Called with the
  /// mutex held.
  void close_expired(std::chrono::steady_clock::time_point now) {
    if (now < next_expiry_sweep_) return;
    next_expiry_sweep_ = coretry::detail::saturating_instant(now, idle_timeout_);
    for (auto it = origins_.begin(); it != origins_.end();) {
      std::erase_if(it->second.idle, [&](const std::unique_ptr<connection>& conn) {
        if (now - conn->idle_since <= idle_timeout_) return false;
        conn->close();
        return true;
      });
      const per_origin& o = it->second;
      it = o.idle.empty() && o.leased == 0 && o.waiters.empty() ? origins_.erase(it) : std::next(it);
    }
  }

  void add_waiter(const std::string& key, asio::any_completion_handler<void(error_code)> handler) {
    // The waiter's cancellation slot belongs to its own operation's strand: it
    // is assigned here, from that strand, and never touched from another
    // thread. A release wakes a waiter by posting its handler only; the slot's
    // handler finds waiters by id, so a stale one cancels nothing.
    asio::cancellation_slot slot = handler.get_cancellation_slot();
    std::lock_guard lock(mutex_);
    per_origin& o = origins_[key];
    if (o.leased + o.idle.size() < max_per_origin_ || !o.idle.empty()) {
      // Freed between try_lease and here: go round again at once.
      asio::post(executor_, asio::append(std::move(handler), error_code{}));
      return;
    }
    const std::uint64_t id = next_waiter_id_++;
    o.waiters.push_back(std::make_unique<waiter>(id, std::move(handler)));
    if (slot.is_connected()) {
      slot.assign([this, key, id](asio::cancellation_type) {
        std::unique_ptr<waiter> cancelled;
        {
          std::lock_guard inner(mutex_);
          auto& queue = origins_[key].waiters;
          for (auto it = queue.begin(); it != queue.end(); ++it)
            if ((*it)->id == id) {
              cancelled = std::move(*it);
              queue.erase(it);
              break;
            }
        }
        if (cancelled)
          asio::post(executor_, asio::append(std::move(cancelled->handler), error_code(asio::error::operation_aborted)));
      });
    }
  }

  void wake(std::unique_ptr<waiter> w, error_code ec) {
    asio::post(executor_, asio::append(std::move(w->handler), ec));
  }

  asio::any_io_executor executor_;
  mutable std::mutex mutex_;
  std::map<std::string, per_origin> origins_;
  std::size_t max_per_origin_;
  duration idle_timeout_;
  std::uint64_t opened_ = 0;
  std::uint64_t stale_discarded_ = 0;
  std::uint64_t lookups_ = 0;
  std::uint64_t next_waiter_id_ = 1;
  std::chrono::steady_clock::time_point next_expiry_sweep_{};
};

lease::~lease() {
  if (pool_) pool_->give_back(key_, std::move(conn_), reusable_);
}

client_options checked(client_options o) {
  const auto refuse = [](const char* problem) { throw std::invalid_argument(std::string("coretry::http: ") + problem); };
  if (o.connect_timeout < duration::zero()) refuse("connect_timeout must not be negative (zero: none of its own)");
  if (o.idle_timeout < duration::zero()) refuse("idle_timeout must not be negative (zero: none)");
  if (o.pool_idle_timeout < duration::zero()) refuse("pool_idle_timeout must not be negative");
  if (o.max_connections_per_origin == 0) refuse("max_connections_per_origin must be at least 1");
  if (o.header_limit == 0) refuse("header_limit must be at least 1 byte");
  if (o.line_limit == 0) refuse("line_limit must be at least 1 byte");
  return o;
}

struct client_state {
  client_state(asio::any_io_executor ex, client_options o)
      : executor(std::move(ex)), options(checked(std::move(o))),
        pool(executor, options.max_connections_per_origin, options.pool_idle_timeout) {
    if (!options.ca_file.empty()) {
      // A client given a CA file speaks HTTPS: its TLS context is made now,
      // so that a bad file is a clear error at construction (not a handshake
      // failure on every attempt later) and loading the trust stores is not
      // charged to the first request's deadline.
      if (::access(options.ca_file.c_str(), R_OK) != 0)
        throw std::invalid_argument("coretry::http: cannot read the CA file " + options.ca_file);
      try {
        tls();
      } catch (const boost::system::system_error& e) {
        throw std::invalid_argument("coretry::http: the CA file " + options.ca_file +
                                    " holds no usable PEM certificate: " + e.code().message());
      }
    }
  }

  /// The TLS context, made on first use when no CA file was given: loading
  /// the system trust store is costly, and a client that only speaks plain
  /// HTTP never needs it.
  ssl::context& tls() {
    std::call_once(tls_made_, [this] {
      ssl::context context(ssl::context::tls_client);
      SSL_CTX_set_min_proto_version(context.native_handle(), TLS1_2_VERSION);
      context.set_default_verify_paths();
      if (!options.ca_file.empty()) context.load_verify_file(options.ca_file);
      context.set_verify_mode(options.verify_peer ? ssl::verify_peer : ssl::verify_none);
      tls_.emplace(std::move(context));
    });
    return *tls_;
  }

  asio::any_io_executor executor;
  client_options options;
  connection_pool pool;

private:
  std::once_flag tls_made_;
  std::optional<ssl::context> tls_;
};

/// Resolves, and on cancellation completes at once with operation_aborted.
/// Asio 1.81's resolver has no per-operation cancellation, and cancelling it
/// cannot stop a getaddrinfo already running on its background thread (a DNS
/// server that does not answer holds it for its whole timeout): the lookup is
/// abandoned instead, and its late result dropped.
template <class Token>
auto async_resolve_abandonable(const asio::any_io_executor& ex, const std::string& host, const std::string& port,
                               Token&& token) {
  return asio::async_initiate<Token, void(error_code, tcp::resolver::results_type)>(
      [&ex, &host, &port](auto handler) {
        using handler_type = decltype(handler);
        // Shared by the lookup and the cancellation, which both run on the
        // handler's executor: whichever comes first takes the handler.
        struct lookup {
          explicit lookup(const asio::any_io_executor& e) : resolver(e) {}
          tcp::resolver resolver;
          std::optional<handler_type> waiting;
        };
        auto shared = std::make_shared<lookup>(ex);
        auto slot = asio::get_associated_cancellation_slot(handler);
        auto handler_ex = asio::get_associated_executor(handler, ex);
        shared->waiting.emplace(std::move(handler));
        if (slot.is_connected())
          slot.assign([shared, handler_ex](asio::cancellation_type) {
            if (!shared->waiting) return;
            shared->resolver.cancel(); // a lookup still queued does not start
            handler_type taken = std::move(*shared->waiting);
            shared->waiting.reset();
            asio::post(handler_ex, asio::append(std::move(taken), error_code(asio::error::operation_aborted),
                                                tcp::resolver::results_type{}));
          });
        shared->resolver.async_resolve(
            host, port,
            asio::bind_executor(handler_ex, [shared, slot](error_code ec, tcp::resolver::results_type r) mutable {
              if (!shared->waiting) return; // abandoned
              if (slot.is_connected()) slot.clear();
              handler_type taken = std::move(*shared->waiting);
              shared->waiting.reset();
              std::move(taken)(ec, std::move(r));
            }));
      },
      token);
}

/// A cancellation that arrives between two operations is recorded in the
/// coroutine's state but reaches neither: check it before starting each one,
/// or an attempt could wait forever on a server that never answers.
bool cancellation_requested(const asio::cancellation_state& state) {
  return state.cancelled() != asio::cancellation_type::none;
}

bool is_ip_literal(const std::string& host) {
  error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

/// The endpoint of an origin whose host is an IP address, if it is one.
std::optional<tcp::endpoint> literal_endpoint(const origin& where) {
  error_code ec;
  const auto address = asio::ip::make_address(where.host, ec);
  if (ec) return std::nullopt;
  unsigned port = 0;
  const char* const end = where.port.data() + where.port.size();
  const auto [stop, problem] = std::from_chars(where.port.data(), end, port);
  if (problem != std::errc{} || stop != end || port > 65535) return std::nullopt; // the resolver will say why
  return tcp::endpoint(address, static_cast<unsigned short>(port));
}

/// Resolve, connect and (for https) handshake: everything before the request
/// is written, so a failure here provably never reached the server.
asio::awaitable<error_code> establish(client_state& state, const origin& where, lease& held, exchange& x) {
  auto ex = co_await asio::this_coro::executor;
  const auto cancel_state = co_await asio::this_coro::cancellation_state;
  tcp::socket socket(ex);
  if (const auto address = literal_endpoint(where)) {
    // An address needs no lookup. Asio 1.81 runs lookups one at a time on a
    // background thread, where cancellation cannot reach a getaddrinfo
    // already running: a slow DNS server would hold this attempt up too.
    x.reached = stage::connecting;
    if (cancellation_requested(cancel_state)) co_return asio::error::operation_aborted;
    auto [connect_ec] = co_await socket.async_connect(*address, asio::as_tuple(asio::use_awaitable));
    if (connect_ec) co_return connect_ec;
  } else {
    x.reached = stage::resolving;
    if (cancellation_requested(cancel_state)) co_return asio::error::operation_aborted;
    state.pool.note_lookup();
    auto [resolve_ec, endpoints] =
        co_await async_resolve_abandonable(ex, where.host, where.port, asio::as_tuple(asio::use_awaitable));
    if (resolve_ec) co_return resolve_ec;

    x.reached = stage::connecting;
    if (cancellation_requested(cancel_state)) co_return asio::error::operation_aborted;
    auto [connect_ec, endpoint] = co_await asio::async_connect(socket, endpoints, asio::as_tuple(asio::use_awaitable));
    if (connect_ec) co_return connect_ec;
  }
  socket.set_option(tcp::no_delay(true));
  state.pool.note_opened();
  // The read buffer's bound is what limits a chunk-size line, its
  // extensions and the trailers: Beast 1.81's parser waits for a whole line
  // however long it is.
  const std::size_t buffer_limit = std::size_t{state.options.header_limit} + state.options.line_limit;
  if (!where.tls) {
    held.attach(std::make_unique<connection>(std::move(socket)));
    held.get()->buffer.max_size(buffer_limit);
    co_return error_code{};
  }

  x.reached = stage::handshaking;
  held.attach(std::make_unique<connection>(std::move(socket), state.tls()));
  held.get()->buffer.max_size(buffer_limit);
  auto& stream = std::get<ssl::stream<tcp::socket>>(held.get()->stream);
  // SNI carries host names only, never address literals (RFC 6066 §3).
  if (!is_ip_literal(where.host) && !SSL_set_tlsext_host_name(stream.native_handle(), where.host.c_str()))
    co_return error_code(static_cast<int>(::ERR_get_error()), asio::error::get_ssl_category());
  stream.set_verify_callback(ssl::host_name_verification(where.host));
  if (cancellation_requested(cancel_state)) co_return asio::error::operation_aborted;
  auto [handshake_ec] = co_await stream.async_handshake(ssl::stream_base::client, asio::as_tuple(asio::use_awaitable));
  co_return handshake_ec;
}

/// Runs `op` (an awaitable producing T) under `limit`, as a nested deadline
/// inside the attempt's: terminal cancellation on expiry, completion only
/// after the operation has finished.
template <class T>
asio::awaitable<coretry::detail::attempt_completion<T>> under_limit(asio::steady_timer& timer, duration limit,
                                                                    asio::awaitable<T> op) {
  co_return co_await asio::async_initiate<const asio::use_awaitable_t<>&,
                                          void(coretry::detail::attempt_completion<T>)>(
      [&timer, limit](auto handler, asio::awaitable<T> inner) {
        auto ex = asio::get_associated_executor(handler, timer.get_executor());
        coretry::detail::run_attempt<T>(timer, coretry::detail::saturating_instant(asio::steady_timer::clock_type::now(), limit),
                                        coretry::default_cancellation_repeat, ex, std::move(inner),
                                        std::move(handler));
      },
      asio::use_awaitable, std::move(op));
}

/// Reads one response into `parser`, one read of the stream at a time, and
/// looks for cancellation before each read: Beast's http::async_read (Boost
/// 1.81) starts its next read without looking, so a signal arriving between
/// two reads would be missed and the attempt would wait on a silent server.
/// With an idle limit, every read must bring something within it; the
/// attempt's deadline still bounds the whole.
template <class Stream>
asio::awaitable<error_code> read_response(client_state& state, Stream& stream, connection& conn,
                                          beast_http::response_parser<streamed_body>& parser,
                                          const asio::cancellation_state& cancel_state, bool& answered) {
  std::optional<asio::steady_timer> idle;
  if (state.options.idle_timeout != duration::zero()) idle.emplace(co_await asio::this_coro::executor);
  for (;;) {
    // Parse what is buffered: a header first, then as much body as there is.
    if (const error_code ec = parse_buffered(conn.buffer, parser)) co_return ec;
    if (parser.is_done()) co_return error_code{};
    if (cancellation_requested(cancel_state)) co_return asio::error::operation_aborted;

    const std::size_t size = next_read_size(conn.buffer);
    if (size == 0) co_return full_buffer_error(parser); // one unfinished line fills the bounded buffer
    const auto space = conn.buffer.prepare(size);
    error_code ec;
    std::size_t n = 0;
    if (!idle) {
      std::tie(ec, n) = co_await stream.async_read_some(space, asio::as_tuple(asio::use_awaitable));
    } else {
      auto read_some = [&]() -> asio::awaitable<std::size_t> {
        co_return co_await stream.async_read_some(space, asio::use_awaitable);
      };
      auto done = co_await under_limit<std::size_t>(*idle, state.options.idle_timeout, read_some());
      if (done.exception) std::rethrow_exception(done.exception);
      ec = done.error == attempt_error::timed_out ? error_code(asio::error::timed_out) : done.error;
      if (done.value) n = *done.value;
    }
    conn.buffer.commit(n);
    if (n != 0) answered = true;
    if (ec == asio::error::eof) {
      // The server closed: that ends a body delimited by the connection's
      // end; anything else is cut short.
      if (!parser.got_some()) co_return beast_http::error::end_of_stream;
      ec = {};
      parser.put_eof(ec);
      co_return ec;
    }
    if (ec) co_return ec;
  }
}

/// `answered` tells whether any byte of a response arrived.
template <class Stream>
asio::awaitable<void> write_and_read(client_state& state, Stream& stream, connection& conn, const request& req,
                                     const body_streaming& streaming, exchange& x, bool& keep_alive, bool& answered) {
  const auto cancel_state = co_await asio::this_coro::cancellation_state;
  x.reached = stage::writing;
  if (cancellation_requested(cancel_state)) {
    x.error = asio::error::operation_aborted;
    co_return;
  }
  auto [write_ec, written] = co_await beast_http::async_write(stream, req, asio::as_tuple(asio::use_awaitable));
  x.bytes_written = written;
  if (write_ec) {
    x.error = write_ec;
    co_return;
  }

  x.reached = stage::reading;
  // Interim responses (100 Continue, 103 Early Hints) come before the final
  // one (RFC 9110 §15.2): each is read with a fresh parser and skipped, up to
  // a bound: a server sending them forever would hold the attempt to its end.
  for (unsigned interim = 0;; ++interim) {
    if (interim > state.options.max_interim_responses) {
      x.error = response_error::too_many_interim_responses;
      co_return;
    }
    beast_http::response_parser<streamed_body> parser;
    parser.header_limit(state.options.header_limit);
    parser.body_limit(state.options.body_limit);
    // A body that may go to the sink is bounded by the sink, not by the
    // parser; one kept in memory still by body_limit (in the body itself).
    parser.get().body().limit = state.options.body_limit;
    if (streaming.enabled()) {
      parser.body_limit(boost::none);
      parser.get().body().streaming = &streaming;
    }
    if (req.method() == beast_http::verb::head) parser.skip(true);
    if (cancellation_requested(cancel_state)) {
      x.error = asio::error::operation_aborted;
      co_return;
    }
    if (const error_code ec = co_await read_response(state, stream, conn, parser, cancel_state, answered)) {
      x.error = ec;
      co_return;
    }
    const unsigned status = parser.get().result_int();
    if (is_interim(status)) continue;
    // The parser knows what the message alone does not: a body that ended
    // with the connection. A request that asked to close, and a connection
    // switched to another protocol, are not reused either.
    keep_alive = parser.keep_alive() && req.keep_alive() && status != 101;
    x.res.emplace(to_response(parser.release()));
    break;
  }
  x.received_at = std::chrono::system_clock::now();
  x.reached = stage::complete;
  // Bytes beyond the response (a server that sent more than it announced)
  // would be read as the next request's answer: such a connection is closed.
  keep_alive = keep_alive && conn.buffer.size() == 0;
}

} // namespace detail

client::client(asio::any_io_executor ex, client_options options)
    : state_(std::make_shared<detail::client_state>(std::move(ex), std::move(options))) {}

client::~client() = default;

asio::any_io_executor client::get_executor() const { return state_->executor; }
pool_stats client::stats() const { return state_->pool.stats(); }
void client::close_idle() { state_->pool.close_idle(); }

client::prepared client::prepare(std::string_view url, request&& req, const request_options& options) const {
  url_parts parts = parse_url(url);
  if (auto problem = options.policy.validate()) throw std::invalid_argument("coretry::policy: " + *problem);

  auto prepared_req = std::make_shared<detail::prepared_request>();
  detail::origin& where = prepared_req->where;
  where.tls = parts.tls;
  where.host = parts.host;
  where.port = std::to_string(parts.port);
  where.key = std::string(where.tls ? "https://" : "http://") + where.host + ":" + where.port;

  if (req.target().empty()) req.target(parts.target);
  if (req.target().front() != '/' && !(req.target() == "*" && req.method() == beast_http::verb::options))
    throw std::invalid_argument("coretry::http: the request target must begin with '/'");
  if (req.find(beast_http::field::host) == req.end()) {
    // The same name that is looked up and, over TLS, verified.
    std::string host = where.host.find(':') != std::string::npos ? "[" + where.host + "]" : where.host;
    const bool default_port = !parts.explicit_port || parts.port == (where.tls ? 443 : 80);
    if (!default_port) host += ":" + where.port;
    req.set(beast_http::field::host, host);
  }
  if (parts.user && req.find(beast_http::field::authorization) == req.end()) {
    // Credentials in the URL go to this origin only, as Basic authorization
    // (the client follows no redirects); a caller's own Authorization wins.
    req.set(beast_http::field::authorization, "Basic " + base64(*parts.user + ":" + parts.password));
  }
  if (req.find(beast_http::field::user_agent) == req.end() && !state_->options.user_agent.empty())
    req.set(beast_http::field::user_agent, state_->options.user_agent);
  if (options.idempotency_key) {
    if (options.idempotency_key->find_first_of("\r\n") != std::string::npos)
      throw std::invalid_argument("coretry::http: idempotency key contains CR or LF");
    req.set("Idempotency-Key", *options.idempotency_key);
  } else if (options.generate_idempotency_key && req.find("Idempotency-Key") == req.end()) {
    // One key per logical operation, the same on every attempt.
    req.set("Idempotency-Key", boost::uuids::to_string(boost::uuids::random_generator()()));
  }
  req.prepare_payload();
  if (auto problem = detail::request_problem(req)) throw std::invalid_argument("coretry::http: " + *problem);

  prepared p;
  p.retry.safety = is_idempotent(req.method()) ? repeat_safety::idempotent
                   : req.find("Idempotency-Key") != req.end() ? repeat_safety::idempotency_key
                                                              : repeat_safety::unsafe;
  p.retry.budget = options.budget;
  p.retry.observer = options.observer;
  p.retry.random = options.random;
  p.retry.operation = options.route;
  prepared_req->repeatable = p.retry.safety != repeat_safety::unsafe;
  prepared_req->req = std::move(req);
  prepared_req->body = options.body;
  prepared_req->decorate = options.decorate;
  prepared_req->validate = options.validate;
  prepared_req->classifiers = options.classifiers;
  prepared_req->streaming = {options.stream_body, options.body_sink};
  p.request = std::move(prepared_req);
  return p;
}

namespace detail {

/// One attempt: lease, connect if needed, write, read the complete response.
/// Every failure is recorded in `x`, with how far the attempt got, so that the
/// classifier can tell "never sent" from "outcome unknown".
asio::awaitable<void> attempt_exchange(client_state* state, const prepared_request* prepared,
                                       const attempt_context<std::chrono::steady_clock>& context, exchange& x) {
  const request* req = &prepared->req;
  std::optional<request> per_attempt;
  if (prepared->body) {
    // A streamed body is reopened for every attempt, never resent consumed.
    std::optional<std::string> body = prepared->body(context.number);
    if (!body) {
      x.problem = "the request body cannot be reproduced for attempt " + std::to_string(context.number);
      co_return;
    }
    per_attempt.emplace(prepared->req);
    per_attempt->body() = std::move(*body);
    per_attempt->prepare_payload();
    req = &*per_attempt;
  }
  if (prepared->decorate) {
    if (!per_attempt) per_attempt.emplace(prepared->req);
    prepared->decorate(*per_attempt, context);
    req = &*per_attempt;
  }
  if (per_attempt) {
    if (auto problem = request_problem(*per_attempt)) {
      x.problem = "after the request decorator: " + *problem;
      co_return;
    }
  }

  const std::string& key = prepared->where.key;
  const auto cancel_state = co_await asio::this_coro::cancellation_state;
  for (;;) {
    std::optional<lease> held = state->pool.try_lease(key);
    while (!held) {
      if (cancellation_requested(cancel_state)) {
        x.error = asio::error::operation_aborted;
        co_return;
      }
      auto [ec] = co_await state->pool.async_wait_for_release(key, asio::as_tuple(asio::use_awaitable));
      if (ec) {
        x.error = ec;
        co_return;
      }
      if (auto again = state->pool.try_lease(key)) held.emplace(std::move(*again));
    }

    if (held->get()) {
      x.reused_connection = true;
    } else {
      error_code ec;
      if (state->options.connect_timeout == duration::zero()) {
        ec = co_await establish(*state, prepared->where, *held, x);
      } else {
        asio::steady_timer limit(co_await asio::this_coro::executor);
        auto done = co_await under_limit<error_code>(limit, state->options.connect_timeout,
                                                     establish(*state, prepared->where, *held, x));
        if (done.exception) std::rethrow_exception(done.exception);
        ec = done.error == attempt_error::timed_out ? error_code(asio::error::timed_out)
                                                    : done.error ? done.error : *done.value;
      }
      if (ec) {
        x.error = ec;
        co_return; // the lease closes whatever was opened
      }
    }

    connection& conn = *held->get();
    bool keep_alive = false;
    bool answered = false;
    if (auto* tls = std::get_if<ssl::stream<tcp::socket>>(&conn.stream))
      co_await write_and_read(*state, *tls, conn, *req, prepared->streaming, x, keep_alive, answered);
    else
      co_await write_and_read(*state, std::get<tcp::socket>(conn.stream), conn, *req, prepared->streaming, x, keep_alive,
                           answered);

    // A repeatable request that found its reused connection closed by the
    // server after the check before reuse, before a byte of answer, goes
    // again on a fresh one within the same attempt. The closed connection is
    // dropped with its lease.
    if (x.reused_connection && !answered && closed_by_peer(x.error) && prepared->repeatable &&
        !cancellation_requested(cancel_state)) {
      state->pool.note_stale();
      exchange fresh;
      fresh.idempotency_key = std::move(x.idempotency_key);
      x = std::move(fresh);
      continue;
    }

    // Only a connection whose exchange ended cleanly goes back to the pool.
    if (!x.error && keep_alive) held->mark_reusable();
    break;
  }
  if (x.res && x.res->result_int() >= 200 && x.res->result_int() < 300 && prepared->validate)
    if (auto problem = prepared->validate(*x.res)) x.problem = std::move(*problem);
}

} // namespace detail

asio::awaitable<exchange> client::send_once(std::shared_ptr<detail::client_state> state,
                                            std::shared_ptr<const detail::prepared_request> prepared,
                                            attempt_context<std::chrono::steady_clock> context) {
  // A cancelled attempt must still report how far it got: no co_await may
  // throw on cancellation; each operation's error says it instead.
  co_await asio::this_coro::throw_if_cancelled(false);
  exchange x;
  if (const auto key = prepared->req.find("Idempotency-Key"); key != prepared->req.end())
    x.idempotency_key = std::string(key->value());
  try {
    co_await detail::attempt_exchange(state.get(), prepared.get(), context, x);
  } catch (const boost::system::system_error& e) {
    x.error = e.code();
  }
  co_return x;
}

verdict client::classify(const detail::prepared_request& request, const error_code& ec, const exchange& x) {
  for (const auto& extension : request.classifiers)
    if (auto v = extension(ec, x)) return *v;
  // The client's own refusals of a response: the server would send the same.
  if (!ec && x.error.category() == response_error_category()) {
    switch (static_cast<response_error>(x.error.value())) {
    case response_error::line_too_long: return verdict::permanent("response_line_too_long", delivery::unknown);
    case response_error::too_many_interim_responses:
      return verdict::permanent("too_many_interim_responses", delivery::unknown);
    }
  }
  return classify_exchange(ec, x);
}

} // namespace coretry::http
