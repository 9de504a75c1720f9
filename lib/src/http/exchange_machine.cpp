#include "exchange_machine.hpp"
#include "response_reading.hpp"

#include <coretry/http/client_error.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/http/error.hpp>

namespace coretry::http::detail {

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using boost::system::error_code;
using action_kind = exchange_action::kind;

bool closed_by_peer(const error_code& ec) {
  return ec == asio::error::eof || ec == beast_http::error::end_of_stream || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::ssl::error::stream_truncated;
}

exchange_action exchange_machine::start(const request& req, boost::beast::flat_buffer& buffer, std::string& head,
                                        bool reused) {
  req_ = &req;
  buffer_ = &buffer;
  head_ = &head;
  reused_ = reused;
  answered_ = false;
  keep_alive_ = false;
  interim_ = 0;
  parser_.reset();
  x_.reached = stage::writing;
  write_request_head(head, req, rules_.added);
  return {action_kind::write, request_buffers(head, req)};
}

exchange_action exchange_machine::written(const error_code& ec, std::size_t n) {
  x_.bytes_written = n;
  // A large head's room is not kept with an idle connection.
  if (head_->capacity() > max_kept_head) std::string().swap(*head_);
  if (ec) return end(ec);
  x_.reached = stage::reading;
  return next_response();
}

/// Interim responses (100 Continue, 103 Early Hints) come before the final
/// one (RFC 9110 §15.2): each is read with a fresh parser and skipped, up to
/// a bound: a server sending them forever would hold the attempt to its end.
exchange_action exchange_machine::next_response() {
  if (interim_ > rules_.max_interim) return end(response_error::too_many_interim_responses);
  auto& parser = parser_.emplace();
  parser.header_limit(rules_.header_limit);
  parser.body_limit(rules_.body_limit);
  // A body that may go to the sink is bounded by the sink, not by the
  // parser; one kept in memory still by body_limit (in the body itself).
  parser.get().body().limit = rules_.body_limit;
  if (rules_.streaming && rules_.streaming->enabled()) {
    parser.body_limit(boost::none);
    parser.get().body().streaming = rules_.streaming;
  }
  if (req_->method() == beast_http::verb::head) parser.skip(true);
  return parse_or_read();
}

/// Parses what is buffered (the body sink runs here), then asks for more
/// unless the response is done.
exchange_action exchange_machine::parse_or_read() {
  if (const error_code ec = parse_buffered(*buffer_, *parser_)) return end(ec);
  if (parser_->is_done()) return response_done();
  const std::size_t size = next_read_size(*buffer_);
  // One unfinished line fills the bounded buffer.
  if (size == 0) return end(full_buffer_error(*parser_));
  exchange_action next{action_kind::read};
  next.in = buffer_->prepare(size);
  return next;
}

exchange_action exchange_machine::read(const error_code& ec, std::size_t n) {
  buffer_->commit(n);
  const bool first = n != 0 && !answered_; // of any response, an interim one included
  answered_ = answered_ || n != 0;
  exchange_action next;
  if (ec == asio::error::eof) {
    // The server closed: that ends a body delimited by the connection's end;
    // anything else is cut short.
    error_code ended;
    if (!parser_->got_some()) ended = beast_http::error::end_of_stream;
    else parser_->put_eof(ended);
    next = ended ? end(ended) : response_done();
  } else {
    next = ec ? end(ec) : parse_or_read();
  }
  next.answered = first;
  return next;
}

exchange_action exchange_machine::response_done() {
  auto& parser = *parser_;
  const unsigned status = parser.get().result_int();
  if (is_interim(status)) {
    ++interim_;
    return next_response();
  }
  // The parser knows what the message alone does not: a body that ended
  // with the connection. A request that asked to close, and a connection
  // switched to another protocol, are not reused either. Bytes beyond the
  // response (a server that sent more than it announced) would be read as
  // the next request's answer: such a connection is closed.
  keep_alive_ = parser.keep_alive() && req_->keep_alive() && status != 101 && buffer_->size() == 0;
  x_.res.emplace(to_response(parser.release()));
  x_.reached = stage::complete;
  exchange_action next = end({});
  next.complete = true;
  return next;
}

exchange_action exchange_machine::end(const error_code& ec) {
  if (ec) x_.error = ec;
  parser_.reset();
  // A repeatable request that found its reused connection closed by the
  // server after the check before reuse, before a byte of answer, goes again
  // on a fresh one within the same attempt.
  if (reused_ && !answered_ && closed_by_peer(x_.error) && rules_.repeatable) {
    interim_ = 0;
    keep_alive_ = false;
    return {action_kind::retry_fresh};
  }
  // Only a connection whose exchange ended cleanly goes back to the pool.
  return {!x_.error && keep_alive_ ? action_kind::keep_connection : action_kind::close_connection};
}

exchange_action exchange_machine::released() {
  const response* res = x_.res ? &*x_.res : nullptr;
  if (res && res->result_int() >= 200 && res->result_int() < 300 && rules_.validate && *rules_.validate)
    if (auto problem = (*rules_.validate)(*res)) x_.problem = std::move(*problem);
  return {action_kind::done};
}

} // namespace coretry::http::detail
