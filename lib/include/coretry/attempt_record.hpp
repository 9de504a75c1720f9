#ifndef CORETRY_ATTEMPT_RECORD_HPP
#define CORETRY_ATTEMPT_RECORD_HPP

#include <coretry/policy.hpp>
#include <coretry/verdict.hpp>
#include <coretry/wait_source.hpp>

#include <boost/system/error_code.hpp>

namespace coretry {

/// One attempt as it happened. Times are measured from the operation's start
/// on the timer's clock.
struct attempt_record {
  unsigned number = 0;           ///< 1 for the initial attempt
  duration wait_before{};        ///< the sleep that preceded it (zero for the first)
  wait_source wait_from = wait_source::none;
  duration start{};
  duration end{};
  duration allowance{};          ///< its deadline, from its start
  boost::system::error_code error; ///< the attempt's own error (attempt_error::timed_out on expiry)
  verdict classified;
};

} // namespace coretry

#endif
