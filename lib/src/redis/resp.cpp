#include "resp.hpp"

#include <coretry/net/tls.hpp>

#include <hiredis/hiredis.h>

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <new>

namespace coretry::redis::detail {

namespace asio = boost::asio;

namespace {

// The reader builds coretry's reply objects through these, so that the
// bounds hold before anything is allocated: an array header announcing more
// than max_array_elements is refused (returning null makes the reader fail),
// and a bulk string cannot exceed max_reply_bytes because no more than that
// is ever fed for one reply.
reply* attach(const redisReadTask* task, reply&& r) {
  if (task->parent) {
    auto* parent = static_cast<reply*>(task->parent->obj);
    if (task->idx < 0 || static_cast<std::size_t>(task->idx) >= parent->elements.size()) return nullptr;
    parent->elements[static_cast<std::size_t>(task->idx)] = std::move(r);
    return &parent->elements[static_cast<std::size_t>(task->idx)];
  }
  return new (std::nothrow) reply(std::move(r));
}

void* make_string(const redisReadTask* task, char* s, size_t n) noexcept {
  try {
    reply r;
    r.type = task->type == REDIS_REPLY_ERROR    ? reply::kind::error
             : task->type == REDIS_REPLY_STATUS ? reply::kind::status
                                                : reply::kind::string;
    r.text.assign(s, n);
    return attach(task, std::move(r));
  } catch (...) {
    return nullptr;
  }
}

void* make_array(const redisReadTask* task, int elements) noexcept {
  if (elements < 0 || elements > max_array_elements) return nullptr;
  // Elements of all the reply's arrays together (nested arrays would
  // otherwise multiply the bound).
  auto* total = static_cast<int*>(task->privdata);
  if (total && (*total += elements) > max_reply_elements) return nullptr;
  try {
    reply r;
    r.type = reply::kind::array;
    r.elements.resize(static_cast<std::size_t>(elements));
    return attach(task, std::move(r));
  } catch (...) {
    return nullptr;
  }
}

void* make_integer(const redisReadTask* task, long long value) noexcept {
  try {
    reply r;
    r.type = reply::kind::integer;
    r.integer = value;
    return attach(task, std::move(r));
  } catch (...) {
    return nullptr;
  }
}

void* make_nil(const redisReadTask* task) noexcept {
  try {
    return attach(task, reply{});
  } catch (...) {
    return nullptr;
  }
}

// Only a top-level reply is owned on its own; elements belong to their parent.
void free_reply(void* r) noexcept { delete static_cast<reply*>(r); }

redisReplyObjectFunctions functions = {make_string, make_array, make_integer, make_nil, free_reply};

} // namespace

void connection::reader_deleter::operator()(redisReader* r) const noexcept { redisReaderFree(r); }

connection::connection(asio::any_io_executor ex, asio::ssl::context* tls) : tls_context_(tls), socket_(std::move(ex)) {}

connection::~connection() = default;

void connection::reset_reader() {
  reader_.reset(redisReaderCreateWithFunctions(&functions));
  if (!reader_) throw std::bad_alloc();
  reader_->privdata = &elements_;
}

std::string printable(std::string_view text) {
  std::string out(text.substr(0, 200));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return out;
}

void connection::close() noexcept {
  boost::system::error_code ignored;
  // No TLS close_notify: the connection is given up, not ended politely.
  lowest().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  lowest().close(ignored);
  tls_.reset();
  handshaking_ = false;
  reader_.reset();
}

namespace {

// Why a TLS handshake failed: OpenSSL's reason, and the certificate's
// problem when verification failed.
std::string handshake_problem(SSL* ssl, const boost::system::error_code& ec) {
  std::string why = "Redis TLS handshake failed: " + printable(ec.message());
  const long verified = SSL_get_verify_result(ssl);
  if (verified != X509_V_OK) why += std::string(": ") + X509_verify_cert_error_string(verified);
  return why;
}

} // namespace

asio::awaitable<void> connection::open(const endpoint& at) {
  close();
  asio::ip::tcp::resolver resolver(socket_.get_executor());
  const auto found = co_await resolver.async_resolve(at.host, std::to_string(at.port), asio::use_awaitable);
  co_await asio::async_connect(socket_, found, asio::use_awaitable);
  socket_.set_option(asio::ip::tcp::no_delay(true));
  if (at.tls) {
    if (!tls_context_) throw protocol_error("rediss:// needs a TLS context");
    tls_ = std::make_unique<tls_stream>(std::move(socket_), *tls_context_);
    if (const auto ec = net::expect_peer(*tls_, at.host)) {
      const std::string why = handshake_problem(tls_->native_handle(), ec);
      close();
      throw protocol_error(why);
    }
    handshaking_ = true;
    const auto [ec] = co_await tls_->async_handshake(asio::ssl::stream_base::client, asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::operation_aborted) throw boost::system::system_error(ec);
    if (ec) {
      const std::string why = handshake_problem(tls_->native_handle(), ec);
      close();
      throw protocol_error(why);
    }
    handshaking_ = false;
  }
  reset_reader();
  if (!at.password.empty()) {
    std::vector<std::string> auth;
    auth.push_back("AUTH");
    if (at.user) auth.push_back(*at.user);
    auth.push_back(at.password);
    const reply r = co_await command(auth);
    if (r.type != reply::kind::status) {
      close();
      // The error's code word only (WRONGPASS, NOAUTH, ERR...): a server
      // that echoed the password in its message would have it printed.
      const std::string code = r.type == reply::kind::error ? printable(r.text.substr(0, r.text.find(' '))) : "";
      throw protocol_error("Redis refused AUTH" + (code.empty() ? std::string(": an unexpected reply") : ": " + code));
    }
  }
  if (at.db != 0) {
    std::vector<std::string> select;
    select.push_back("SELECT");
    select.push_back(std::to_string(at.db));
    const reply r = co_await command(select);
    if (r.type != reply::kind::status) {
      close();
      throw protocol_error("Redis refused SELECT " + std::to_string(at.db) + ": " +
                           (r.type == reply::kind::error ? printable(r.text) : "an unexpected reply"));
    }
  }
}

asio::awaitable<void> connection::wait_readable() {
  // The reactor can report a readiness that is already spent: an event for
  // bytes that the last reply's read took (with the io_context on several
  // threads, one thread may hold that event while another reads). Only a
  // byte waiting, the peer's close or an error ends the wait; a wait that
  // finds nothing waits again (the caller bounds it with its own timer).
  for (;;) {
    if (tls_) {
      SSL* ssl = tls_->native_handle();
      if (SSL_pending(ssl) > 0 || BIO_ctrl_pending(SSL_get_rbio(ssl)) > 0) co_return;
    }
    co_await lowest().async_wait(asio::ip::tcp::socket::wait_read, asio::use_awaitable);
    char byte = 0;
    const ssize_t n = ::recv(lowest().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) co_return;
  }
}

asio::awaitable<reply> connection::command(const std::vector<std::string>& args) {
  if (!reader_) throw protocol_error("Redis connection is not open");
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  argv.reserve(args.size());
  lengths.reserve(args.size());
  for (const auto& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  char* formatted = nullptr;
  const int n = redisFormatCommandArgv(&formatted, static_cast<int>(args.size()), argv.data(), lengths.data());
  if (n < 0 || !formatted) throw std::bad_alloc();
  std::unique_ptr<char, void (*)(char*)> owned(formatted, redisFreeCommand);
  const auto out = asio::buffer(formatted, static_cast<std::size_t>(n));
  if (tls_)
    co_await asio::async_write(*tls_, out, asio::use_awaitable);
  else
    co_await asio::async_write(socket_, out, asio::use_awaitable);

  std::vector<char> buffer(4096);
  std::size_t fed = 0;
  elements_ = 0;
  for (;;) {
    void* out = nullptr;
    if (redisReaderGetReply(reader_.get(), &out) != REDIS_OK) {
      const std::string why = reader_->errstr;
      close();
      throw protocol_error("Redis sent a reply coretry does not accept (" + why + ")");
    }
    if (out) {
      std::unique_ptr<reply> r(static_cast<reply*>(out));
      if (reader_->pos < reader_->len) { // one command, one reply: anything more is not ours
        close();
        throw protocol_error("Redis sent more than one reply to one command");
      }
      co_return std::move(*r);
    }
    if (fed >= max_reply_bytes) {
      close();
      throw protocol_error("Redis sent a reply longer than 64 KiB");
    }
    const std::size_t want = std::min(buffer.size(), max_reply_bytes - fed);
    const auto in = asio::buffer(buffer.data(), want);
    const std::size_t got = tls_ ? co_await tls_->async_read_some(in, asio::use_awaitable)
                                 : co_await socket_.async_read_some(in, asio::use_awaitable);
    fed += got;
    if (redisReaderFeed(reader_.get(), buffer.data(), got) != REDIS_OK) {
      close();
      throw protocol_error("Redis reply could not be read");
    }
  }
}

} // namespace coretry::redis::detail
