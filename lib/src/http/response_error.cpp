#include <coretry/http/client_error.hpp>
#include <coretry/http/exchange.hpp>

#include <string>

namespace coretry::http {

namespace {

class response_error_category_impl final : public boost::system::error_category {
public:
  const char* name() const noexcept override { return "coretry.http.response"; }
  std::string message(int value) const override {
    switch (static_cast<response_error>(value)) {
    case response_error::line_too_long:
      return "response line too long (a chunk-size line, chunk extension or trailer section over the line limit)";
    case response_error::too_many_interim_responses: return "too many interim (1xx) responses";
    }
    return "unknown response error";
  }
};

class pool_error_category_impl final : public boost::system::error_category {
public:
  const char* name() const noexcept override { return "coretry.http.pool"; }
  std::string message(int value) const override {
    switch (static_cast<pool_error>(value)) {
    case pool_error::too_late:
      return "too late for a pooled connection (less time left than the origin's exchanges take)";
    }
    return "unknown pool error";
  }
};

} // namespace

const boost::system::error_category& response_error_category() noexcept {
  static const response_error_category_impl category;
  return category;
}

boost::system::error_code make_error_code(response_error e) noexcept {
  return {static_cast<int>(e), response_error_category()};
}

const boost::system::error_category& pool_error_category() noexcept {
  static const pool_error_category_impl category;
  return category;
}

boost::system::error_code make_error_code(pool_error e) noexcept {
  return {static_cast<int>(e), pool_error_category()};
}

} // namespace coretry::http
