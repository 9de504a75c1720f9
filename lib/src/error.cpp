#include <coretry/stop_reason.hpp>

#include <string>

namespace coretry {
namespace {

class retry_category_impl final : public boost::system::error_category {
public:
  const char* name() const noexcept override { return "coretry"; }

  // So that generic code can test coretry's codes the portable way:
  // `ec == std::errc::operation_canceled` holds for a cancelled operation and
  // `ec == std::errc::timed_out` for an attempt whose deadline expired, as it
  // does for Asio's own operation_aborted and timed_out.
  boost::system::error_condition default_error_condition(int value) const noexcept override {
    if (value == static_cast<int>(stop_reason::cancelled))
      return make_error_condition(boost::system::errc::operation_canceled);
    if (value == static_cast<int>(attempt_error::timed_out))
      return make_error_condition(boost::system::errc::timed_out);
    return boost::system::error_condition(value, *this);
  }

  std::string message(int value) const override {
    switch (value) {
    case 0: return "succeeded";
    case static_cast<int>(stop_reason::rejected):
      return "rejected: the failure is one another attempt cannot fix";
    case static_cast<int>(stop_reason::attempts_exhausted):
      return "attempts exhausted: the last allowed attempt failed";
    case static_cast<int>(stop_reason::deadline_exhausted):
      return "deadline exhausted: too little time left for another useful attempt";
    case static_cast<int>(stop_reason::server_delay_too_long):
      return "server delay too long: the requested wait does not fit the deadline";
    case static_cast<int>(stop_reason::budget_exhausted):
      return "retry budget exhausted: no token for another retry";
    case static_cast<int>(stop_reason::cancelled):
      return "cancelled by the caller";
    case static_cast<int>(stop_reason::outcome_unknown):
      return "outcome unknown: a non-idempotent attempt may have taken effect";
    case static_cast<int>(stop_reason::dependency_unhealthy):
      return "dependency unhealthy: the retry gate had no slot for the retry in time";
    case static_cast<int>(stop_reason::concurrency_limited):
      return "concurrency limited: no permit for an attempt to the dependency (too many in flight)";
    case static_cast<int>(attempt_error::timed_out):
      return "attempt timed out";
    default: return "unknown coretry error " + std::to_string(value);
    }
  }
};

} // namespace

const boost::system::error_category& retry_category() noexcept {
  static const retry_category_impl instance;
  return instance;
}

std::string_view to_string(stop_reason reason) noexcept {
  switch (reason) {
  case stop_reason::succeeded: return "succeeded";
  case stop_reason::rejected: return "rejected";
  case stop_reason::attempts_exhausted: return "attempts_exhausted";
  case stop_reason::deadline_exhausted: return "deadline_exhausted";
  case stop_reason::server_delay_too_long: return "server_delay_too_long";
  case stop_reason::budget_exhausted: return "budget_exhausted";
  case stop_reason::cancelled: return "cancelled";
  case stop_reason::outcome_unknown: return "outcome_unknown";
  case stop_reason::dependency_unhealthy: return "dependency_unhealthy";
  case stop_reason::concurrency_limited: return "concurrency_limited";
  }
  return "invalid";
}

} // namespace coretry
