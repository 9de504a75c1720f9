// The names of attempt statuses and deliveries, as logs and JSON show them.

#include <coretry/classify.hpp>
#include <coretry/decision_core.hpp>
#include <coretry/verdict.hpp>

#include <boost/asio/error.hpp>

#include <doctest/doctest.h>

TEST_CASE("verdict: every attempt status has its stable name") {
  CHECK(coretry::to_string(coretry::attempt_status::success) == "success");
  CHECK(coretry::to_string(coretry::attempt_status::transient) == "transient");
  CHECK(coretry::to_string(coretry::attempt_status::permanent) == "permanent");
  CHECK(coretry::to_string(static_cast<coretry::attempt_status>(42)) == "invalid");
}

TEST_CASE("verdict: every delivery has its stable name") {
  CHECK(coretry::to_string(coretry::delivery::unknown) == "unknown");
  CHECK(coretry::to_string(coretry::delivery::never_sent) == "never_sent");
  CHECK(coretry::to_string(coretry::delivery::answered) == "answered");
  CHECK(coretry::to_string(static_cast<coretry::delivery>(42)) == "invalid");
}

TEST_CASE("verdict: the default classifier marks timeouts and refused connections as overload, and the limit's signal follows") {
  using coretry::limit_signal;
  const coretry::verdict timeout = coretry::classify_error(coretry::make_error_code(coretry::attempt_error::timed_out));
  const coretry::verdict refused = coretry::classify_error(boost::asio::error::connection_refused);
  const coretry::verdict reset = coretry::classify_error(boost::asio::error::connection_reset);
  CHECK(timeout.overload);
  CHECK(refused.overload);
  CHECK_FALSE(reset.overload);
  CHECK_FALSE(coretry::verdict::success().overload);
  CHECK(coretry::verdict::transient("http_503").overloaded().overload);
  CHECK(coretry::verdict::transient("http_503").overloaded().category == "http_503");
  // Drops, samples and nothing.
  CHECK(coretry::limit_signal_of(timeout, true, false) == limit_signal::drop);
  CHECK(coretry::limit_signal_of(reset, true, false) == limit_signal::drop); // timed out, whatever the classifier says
  CHECK(coretry::limit_signal_of(refused, false, false) == limit_signal::drop);
  CHECK(coretry::limit_signal_of(coretry::verdict::success(), false, false) == limit_signal::sample);
  CHECK(coretry::limit_signal_of(coretry::verdict::transient("http_500", coretry::delivery::answered), false, false) ==
        limit_signal::sample);
  // A failure that says nothing of the dependency's latency (a name that did
  // not resolve, a connection found closed) is no sample: a burst of them
  // must not become the baseline.
  CHECK(coretry::limit_signal_of(reset, false, false) == limit_signal::ignored);
  CHECK(coretry::limit_signal_of(coretry::classify_error(boost::asio::error::host_not_found), false, false) ==
        limit_signal::ignored);
  CHECK(coretry::limit_signal_of(timeout, true, true) == limit_signal::ignored); // cancelled or superseded
  // Timed out at the overall deadline, before its own limit: out of time, not a drop.
  CHECK(coretry::limit_signal_of(timeout, true, false, true) == limit_signal::ignored);
  CHECK(coretry::limit_signal_of(refused, false, false, true) == limit_signal::drop);
}
