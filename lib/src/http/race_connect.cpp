#include "race_connect.hpp"

#include <coretry/with_deadline.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <deque>
#include <memory>

namespace coretry::http::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using clock_type = asio::steady_timer::clock_type;

namespace {

struct contender {
  contender(const asio::any_io_executor& ex, const tcp::endpoint& e, clock_type::time_point t)
      : socket(ex), at(e), started(t) {}
  tcp::socket socket;
  tcp::endpoint at;
  clock_type::time_point started;
  bool done = false;
  error_code error; ///< its own failure (not a cancellation)
};

/// Shared by the race and its connects' completions, which all run on the
/// race's (serial) executor; the completions keep it alive after the race
/// ended and closed their sockets.
struct race_state {
  explicit race_state(const asio::any_io_executor& ex) : wake(ex) {}
  std::deque<contender> contenders; // stable references while growing
  asio::steady_timer wake;
  std::optional<std::size_t> winner;
  std::size_t running = 0;
  std::size_t failures = 0;
  error_code last_error;
};

} // namespace

asio::awaitable<race_result> race_connect(const std::vector<tcp::endpoint>& endpoints, duration attempt_delay,
                                          const std::function<void(const connect_report&)>& report) {
  const auto ex = co_await asio::this_coro::executor;
  const auto cancel_state = co_await asio::this_coro::cancellation_state;
  auto state = std::make_shared<race_state>(ex);
  std::size_t next = 0;
  std::size_t failures_seen = 0;
  clock_type::time_point next_start{};

  const auto start_next = [&] {
    const std::size_t index = next++;
    const auto now = clock_type::now();
    contender& c = state->contenders.emplace_back(ex, endpoints[index], now);
    next_start = instant_after(now, attempt_delay);
    ++state->running;
    c.socket.async_connect(c.at, [state, index](error_code ec) {
      contender& mine = state->contenders[index];
      mine.done = true;
      --state->running;
      if (!ec && !state->winner) {
        state->winner = index;
      } else if (ec && ec != asio::error::operation_aborted) {
        mine.error = ec;
        state->last_error = ec;
        ++state->failures;
      }
      state->wake.cancel(); // the race looks again
    });
  };

  race_result result;
  start_next();
  for (;;) {
    if (state->winner) break;
    if (cancel_state.cancelled() != asio::cancellation_type::none) {
      result.error = asio::error::operation_aborted;
      break;
    }
    if (state->failures > failures_seen && next < endpoints.size()) {
      // Each failure starts the next address at once.
      while (state->failures > failures_seen && next < endpoints.size()) {
        ++failures_seen;
        start_next();
      }
      continue;
    }
    failures_seen = state->failures;
    if (next < endpoints.size() && clock_type::now() >= next_start) {
      start_next();
      continue;
    }
    if (next == endpoints.size() && state->running == 0) {
      result.error = state->last_error ? state->last_error : error_code(asio::error::host_unreachable);
      break;
    }
    state->wake.expires_at(next < endpoints.size() ? next_start : clock_type::time_point::max());
    co_await state->wake.async_wait(asio::as_tuple(asio::use_awaitable));
  }

  // What became of each address but the winner is reported; whether it
  // counts against the address is address_health's rule.
  const auto ended_at = clock_type::now();
  const duration winner_tried = state->winner ? ended_at - state->contenders[*state->winner].started : duration{};
  for (std::size_t i = 0; i < state->contenders.size(); ++i) {
    contender& c = state->contenders[i];
    if (state->winner && i == *state->winner) continue;
    report({.at = c.at,
            .error = c.error,
            .outrun = state->winner && !c.done,
            .tried = ended_at - c.started,
            .winner_tried = winner_tried});
    error_code ignored;
    c.socket.close(ignored); // a connect still running completes, aborted, into the shared state
  }
  if (state->winner) {
    result.error = {};
    result.winner = state->contenders[*state->winner].at;
    result.socket.emplace(std::move(state->contenders[*state->winner].socket));
  }
  co_return result;
}

} // namespace coretry::http::detail
