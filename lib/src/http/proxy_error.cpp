// The proxy's refusals as error codes (coretry/http/proxy.hpp), apart from
// the rest of the proxy code so that what only classifies needs only this.
#include <coretry/http/proxy.hpp>

#include <string>

namespace coretry::http {

namespace {

class proxy_category final : public boost::system::error_category {
public:
  const char* name() const noexcept override { return "coretry.http.proxy"; }
  std::string message(int value) const override {
    switch (static_cast<proxy_error>(value)) {
    case proxy_error::refused: return "the proxy refused to open a tunnel to the origin";
    case proxy_error::bad_answer: return "the proxy's answer to CONNECT was malformed or too large";
    }
    return "unknown proxy error";
  }
};

} // namespace

const boost::system::error_category& proxy_error_category() noexcept {
  static const proxy_category category;
  return category;
}

boost::system::error_code make_error_code(proxy_error e) noexcept {
  return {static_cast<int>(e), proxy_error_category()};
}

} // namespace coretry::http
