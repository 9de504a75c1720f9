#ifndef CORETRY_CLASSIFY_HPP
#define CORETRY_CLASSIFY_HPP

#include <coretry/outcome.hpp>
#include <coretry/verdict.hpp>

#include <boost/system/error_code.hpp>

namespace coretry {

/// Classifies a transport-level error code: success for no error; transient
/// for timeouts, resets, refused connections and name-resolution failures
/// (refused and unresolved ones provably never reached the peer); permanent
/// for everything else, since an unknown failure must not enter a retry loop.
verdict classify_error(const boost::system::error_code& ec) noexcept;

/// Classifies a nested retrying operation's outcome, so that retrying layers
/// compose: exhausted attempts, deadline, server delay or budget are
/// transient for the outer layer, a rejection stays permanent, an unknown
/// outcome stays unknown.
verdict classify_outcome(stop_reason inner) noexcept;

/// The classifier async_retry uses when given none.
struct default_classifier {
  template <class T>
  verdict operator()(const boost::system::error_code& ec, const T&) const noexcept {
    return classify_error(ec);
  }
  template <class U>
  verdict operator()(const boost::system::error_code& ec, const outcome<U>& inner) const noexcept {
    if (ec) return classify_error(ec);
    return classify_outcome(inner.reason);
  }
};

} // namespace coretry

#endif
