#ifndef CORETRY_HTTP_STREAMED_BODY_HPP
#define CORETRY_HTTP_STREAMED_BODY_HPP

// The body type the client parses responses with: in memory up to a limit,
// as string_body does, or passed piece by piece to the request's body sink
// when its chooser takes the response. Internal to coretry::http.

#include <coretry/http/exchange.hpp>

#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional/optional.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>

namespace coretry::http::detail {

/// request_options::stream_body and body_sink, as the prepared request keeps them.
struct body_streaming {
  std::function<bool(const boost::beast::http::response_header<>&)> choose;
  std::function<boost::system::error_code(std::string_view)> sink;
  bool enabled() const noexcept { return choose && sink; }
};

/// A Beast Body. Unlike string_body, nothing is reserved from the
/// Content-Length the server announces: memory follows the bytes that came.
struct streamed_body {
  struct value_type {
    std::string text;                         ///< the body, when kept in memory
    const body_streaming* streaming = nullptr; ///< set before parsing; null: always in memory
    std::uint64_t limit = 0;                  ///< most bytes kept in memory
    bool streamed = false;                    ///< this response's body went to the sink
  };

  class reader {
  public:
    // Beast requires a reader for requests too; only responses are chosen.
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>& header, value_type& body) : body_(body) {
      if constexpr (!isRequest && std::is_same_v<Fields, boost::beast::http::fields>) header_ = &header;
    }

    void init(const boost::optional<std::uint64_t>& length, boost::system::error_code& ec) {
      ec = {};
      body_.streamed = body_.streaming && body_.streaming->enabled() && header_ &&
                       body_.streaming->choose(*header_);
      if (!body_.streamed && length && *length > body_.limit) ec = boost::beast::http::error::body_limit;
    }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::system::error_code& ec) {
      ec = {};
      std::size_t used = 0;
      for (const auto buffer : boost::beast::buffers_range_ref(buffers)) {
        const std::string_view piece(static_cast<const char*>(buffer.data()), buffer.size());
        if (body_.streamed) {
          ec = body_.streaming->sink(piece);
          if (ec) return used;
        } else {
          if (piece.size() > body_.limit - body_.text.size()) {
            ec = boost::beast::http::error::body_limit;
            return used;
          }
          body_.text.append(piece);
        }
        used += piece.size();
      }
      return used;
    }

    void finish(boost::system::error_code& ec) { ec = {}; }

  private:
    const boost::beast::http::header<false, boost::beast::http::fields>* header_ = nullptr;
    value_type& body_;
  };
};

/// The parsed message as the public response type: the header, and the body
/// when it was kept in memory (empty when it went to the sink).
inline response to_response(boost::beast::http::message<false, streamed_body>&& parsed) {
  response out{std::move(parsed.base())};
  out.body() = std::move(parsed.body().text);
  return out;
}

} // namespace coretry::http::detail

#endif
