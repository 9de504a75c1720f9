#include "serving/serving.hpp"

#include <boost/asio/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>

#include <poll.h>
#include <sys/ioctl.h>
#if defined(__linux__)
#include <linux/sockios.h>
#endif

namespace coretry::serving {

namespace http = boost::beast::http;

std::optional<std::string> validate(const request_limits& limits) {
  if (limits.header_bytes < 64 || limits.header_bytes > most_header_bytes)
    return "the header limit must be between 64 and " + std::to_string(most_header_bytes) + " bytes";
  if (limits.buffer_bytes < limits.header_bytes || limits.buffer_bytes > 2 * most_header_bytes)
    return "the read buffer must hold at least the header limit and at most " + std::to_string(2 * most_header_bytes) +
           " bytes";
  if (limits.header_timeout <= std::chrono::milliseconds::zero() || limits.header_timeout > longest_timeout)
    return "the header timeout must be positive and at most a day";
  if (limits.keep_alive_timeout <= std::chrono::milliseconds::zero() || limits.keep_alive_timeout > longest_timeout)
    return "the keep-alive timeout must be positive and at most a day";
  if (limits.send_timeout <= std::chrono::milliseconds::zero() || limits.send_timeout > longest_timeout)
    return "the send timeout must be positive and at most a day";
  return std::nullopt;
}

std::string_view to_string(read_outcome outcome) {
  switch (outcome) {
  case read_outcome::complete: return "complete";
  case read_outcome::closed: return "closed";
  case read_outcome::idle_timeout: return "idle_timeout";
  case read_outcome::header_timeout: return "header_timeout";
  case read_outcome::header_too_large: return "header_too_large";
  case read_outcome::body_too_large: return "body_too_large";
  case read_outcome::malformed: return "malformed";
  }
  return "closed";
}

unsigned status_for(read_outcome outcome) {
  switch (outcome) {
  case read_outcome::header_too_large: return 431;
  case read_outcome::body_too_large: return 413;
  case read_outcome::malformed: return 400;
  default: return 0;
  }
}

std::string explain(read_outcome outcome, const request_limits& limits) {
  switch (outcome) {
  case read_outcome::header_too_large:
    return "request header larger than " + std::to_string(limits.header_bytes) + " bytes";
  case read_outcome::body_too_large:
    return "request body larger than " + std::to_string(limits.body_bytes) +
           " bytes, or a chunk-size line or trailer larger than " + std::to_string(limits.buffer_bytes) + " bytes";
  case read_outcome::malformed: return "malformed request";
  default: return std::string{to_string(outcome)};
  }
}

read_outcome classify(const boost::system::error_code& error, bool header_done) {
  if (error == boost::beast::error::timeout) return read_outcome::header_timeout;
  if (error == http::error::header_limit) return read_outcome::header_too_large;
  if (error == http::error::body_limit) return read_outcome::body_too_large;
  if (error == http::error::buffer_overflow)
    return header_done ? read_outcome::body_too_large : read_outcome::header_too_large;
  if (error == http::error::end_of_stream || error == http::error::partial_message) return read_outcome::closed;
  if (error.category() == http::make_error_code(http::error::bad_target).category()) return read_outcome::malformed;
  return read_outcome::closed; // reset, aborted, TLS failure: the connection is gone
}

std::size_t unsent_bytes(boost::asio::ip::tcp::socket& socket) {
  if (!socket.is_open()) return 0;
#if defined(__linux__) && defined(SIOCOUTQNSD)
  int unsent = 0;
  if (::ioctl(socket.native_handle(), SIOCOUTQNSD, &unsent) == 0 && unsent > 0) return static_cast<std::size_t>(unsent);
#endif
  return 0;
}

bool clients_waiting(int listener) {
  pollfd ready{listener, POLLIN, 0};
  return listener >= 0 && ::poll(&ready, 1, 0) == 1 && (ready.revents & POLLIN) != 0;
}

void reset(boost::asio::ip::tcp::socket& socket) {
  boost::system::error_code ignored;
  socket.set_option(boost::asio::socket_base::linger(true, 0), ignored);
  socket.close(ignored);
}

boost::asio::awaitable<bool> connection_gate::wait_for_room() {
  while (!closed_ && open_ >= max_open_ && (idle_.empty() || closing_idle_)) {
    room_.expires_at(boost::asio::steady_timer::time_point::max());
    waiting_for_room_ = true;
    co_await room_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable)); // closed() cancels it
    waiting_for_room_ = false;
  }
  co_return !closed_;
}

boost::asio::awaitable<bool> connection_gate::pause_after_accept_error(const boost::system::error_code& error) {
  if (closed_) co_return false;
  if (error == boost::asio::error::connection_aborted) co_return true;
  room_.expires_after(accept_error_pause);
  co_await room_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
  co_return !closed_;
}

void connection_gate::opened() {
  ++open_;
  if (open_ <= max_open_ || idle_.empty() || closing_idle_) return;
  closer close = std::move(idle_.front().second);
  idle_index_.erase(idle_.front().first);
  idle_.pop_front();
  closing_idle_ = true;
  close();
}

void connection_gate::idle(std::uint64_t id, closer close) {
  not_idle(id);
  idle_index_.emplace(id, idle_.insert(idle_.end(), {id, std::move(close)}));
  if (open_ >= max_open_) wake(); // an idle connection can make room now
}

void connection_gate::not_idle(std::uint64_t id) {
  const auto found = idle_index_.find(id);
  if (found == idle_index_.end()) return;
  idle_.erase(found->second);
  idle_index_.erase(found);
}

void connection_gate::not_closed() {
  closing_idle_ = false;
  wake();
}

void connection_gate::closed() {
  if (open_ > 0) --open_;
  closing_idle_ = false;
  // Only a wait for room may end early: a pause after an accept error runs
  // its full length, or a closing connection would end it and the loop spin.
  if (waiting_for_room_) room_.cancel();
}

void connection_gate::close() {
  closed_ = true;
  room_.cancel();
}

} // namespace coretry::serving
