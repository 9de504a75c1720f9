#ifndef CORETRY_OUTCOME_HPP
#define CORETRY_OUTCOME_HPP

#include <coretry/attempt_record.hpp>
#include <coretry/policy.hpp>
#include <coretry/stop_reason.hpp>

#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>
#include <boost/throw_exception.hpp>

#include <optional>
#include <utility>
#include <vector>

namespace coretry {

/// How a retrying operation ended. `value` holds the last attempt's value when
/// that attempt produced one: on success the result, on failure whatever the
/// last attempt returned (for example the last HTTP response), kept for the
/// caller's diagnosis.
template <class T>
struct outcome {
  stop_reason reason = stop_reason::succeeded;
  unsigned attempts = 0;
  std::optional<T> value;
  boost::system::error_code last_error; ///< the last attempt's error, if any
  std::vector<attempt_record> records;
  /// The number of the attempt whose success was taken (0 when none
  /// succeeded); with hedging, not necessarily the last one started.
  unsigned winner = 0;
  duration total_backoff{};
  duration elapsed{};

  bool succeeded() const noexcept { return reason == stop_reason::succeeded; }
  explicit operator bool() const noexcept { return succeeded(); }
  /// The stop reason as an error code (empty on success).
  boost::system::error_code error() const noexcept { return make_error_code(reason); }
  /// The value on success; otherwise throws boost::system::system_error
  /// carrying the stop reason.
  T& get() & {
    if (!succeeded() || !value) boost::throw_exception(boost::system::system_error(error()));
    return *value;
  }
  T&& get() && { return std::move(get()); }
};

} // namespace coretry

#endif
