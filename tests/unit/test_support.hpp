#ifndef CORETRY_TESTS_TEST_SUPPORT_HPP
#define CORETRY_TESTS_TEST_SUPPORT_HPP

// Fakes for exercising the retry engine on virtual time.

#include <coretry/coretry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <deque>
#include <vector>

namespace coretry_tests {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using coretry::testing::manual_clock;
using coretry::testing::manual_timer;
using context = coretry::attempt_context<manual_clock>;

/// The manual clock's instant `since_start` after its epoch.
inline manual_clock::time_point at(coretry::duration since_start) { return manual_clock::time_point{} + since_start; }

/// Options for an operation that is safe to repeat.
inline coretry::retry_options idempotent() {
  coretry::retry_options o;
  o.safety = coretry::repeat_safety::idempotent;
  return o;
}

/// One scripted call of a fake dependency: how long it takes and how it ends.
struct step {
  coretry::duration takes;
  boost::system::error_code error{};
  int value = 200;
};

/// A dependency whose k-th call follows the k-th step (the last repeats).
/// It records when each call started and whether it saw cancellation.
struct fake_dependency {
  explicit fake_dependency(std::vector<step> script) : steps(std::move(script)) {}

  std::vector<step> steps;
  int calls = 0;
  std::vector<coretry::duration> started_at;
  std::vector<coretry::duration> cancelled_at;

  asio::awaitable<int> call() {
    const step s = steps.at(std::min<std::size_t>(calls, steps.size() - 1));
    ++calls;
    manual_timer work(co_await asio::this_coro::executor);
    started_at.push_back(work.now().time_since_epoch());
    work.expires_after(s.takes);
    auto [ec] = co_await work.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) {
      cancelled_at.push_back(work.now().time_since_epoch());
      throw boost::system::system_error(ec);
    }
    if (s.error) throw boost::system::system_error(s.error);
    co_return s.value;
  }

  auto factory() {
    return [this](context) { return call(); };
  }
};

/// Classifies the fake's int "status": 2xx success, 503 transient with an
/// optional server delay, other values permanent; errors by code.
struct status_classifier {
  std::optional<coretry::duration> server_delay;
  coretry::verdict operator()(const boost::system::error_code& ec, int status) const {
    if (ec) return coretry::classify_error(ec);
    if (status >= 200 && status < 300) return coretry::verdict::success();
    if (status == 503) return coretry::verdict::transient("http_503", coretry::delivery::answered, server_delay);
    return coretry::verdict::permanent("http_4xx");
  }
};

inline coretry::duration ms(std::int64_t n) { return std::chrono::milliseconds(n); }

} // namespace coretry_tests

#endif
