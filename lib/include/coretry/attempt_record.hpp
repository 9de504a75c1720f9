#ifndef CORETRY_ATTEMPT_RECORD_HPP
#define CORETRY_ATTEMPT_RECORD_HPP

#include <coretry/policy.hpp>
#include <coretry/verdict.hpp>
#include <coretry/wait_source.hpp>

#include <boost/system/error_code.hpp>

#include <string_view>

namespace coretry {

/// Why an attempt was sent.
enum class attempt_kind {
  first, ///< the operation's initial attempt
  retry, ///< after the attempts before it had all failed
  hedge, ///< a backup sent while an earlier attempt was still running
};

/// Stable snake_case name of a kind ("first", "retry", "hedge").
std::string_view to_string(attempt_kind kind) noexcept;

/// The connection an attempt used, where its operation has one (HTTP).
enum class connection_use {
  none,   ///< no connection: the operation has none, or the attempt got none
  fresh,  ///< a connection the attempt opened
  reused, ///< a connection kept from an earlier exchange
};

/// Stable name of a connection use: "none", "new", "reused" (the
/// `connection` label of coretry_attempt_duration_seconds).
std::string_view to_string(connection_use use) noexcept;

/// Customisation point: the connection an attempt's value says it used.
/// None, unless specialised for the value type (coretry::http::exchange is).
template <class T>
struct connection_of {
  static constexpr connection_use get(const T&) noexcept { return connection_use::none; }
};

/// One attempt as it happened. Times are measured from the operation's start
/// on the timer's clock.
struct attempt_record {
  unsigned number = 0;           ///< 1 for the initial attempt
  attempt_kind kind = attempt_kind::first;
  duration wait_before{};        ///< the sleep that preceded it (zero for the first)
  wait_source wait_from = wait_source::none;
  duration start{};
  duration end{};
  duration allowance{};          ///< its deadline, from its start
  boost::system::error_code error; ///< the attempt's own error (attempt_error::timed_out on expiry)
  verdict classified;
  /// Ended by the operation because another attempt's result was taken (a
  /// hedging loser): not counted in the gate's window.
  bool superseded = false;
  /// The connection it used, as its value says (connection_of).
  connection_use connection = connection_use::none;
};

} // namespace coretry

#endif
