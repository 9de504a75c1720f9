// A user's program built against an installed coretry: one retry on a real timer.
#include <coretry/coretry.hpp>
#include <coretry/http/client.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <iostream>

// The consumer states the mode it expects coretry to impose (or not).
#if !defined(EXPECT_SEPARATE_COMPILATION)
#error "the consumer project must define EXPECT_SEPARATE_COMPILATION to 0 or 1"
#elif EXPECT_SEPARATE_COMPILATION && !(defined(BOOST_ASIO_SEPARATE_COMPILATION) && defined(BOOST_BEAST_SEPARATE_COMPILATION))
#error "coretry was built with separate compilation but did not pass the Asio and Beast definitions on"
#elif !EXPECT_SEPARATE_COMPILATION && (defined(BOOST_ASIO_SEPARATE_COMPILATION) || defined(BOOST_BEAST_SEPARATE_COMPILATION))
#error "coretry was built header-only but imposed separate compilation"
#endif

namespace asio = boost::asio;
using namespace std::chrono_literals;

int main() {
  asio::io_context io;
  coretry::policy p;
  p.backoff.initial_window = 1ms;
  coretry::retry_options options;
  options.safety = coretry::repeat_safety::idempotent;

  // Coroutine factories take the attempt context by value: a reference
  // parameter would dangle once the coroutine is suspended.
  auto attempt = [](coretry::attempt_context<std::chrono::steady_clock> context) -> asio::awaitable<int> {
    asio::steady_timer work(co_await asio::this_coro::executor, 1ms);
    co_await work.async_wait(asio::use_awaitable);
    if (context.number == 1) throw boost::system::system_error(asio::error::connection_reset);
    co_return 42;
  };
  coretry::async_retry(io.get_executor(), p, options, attempt,
                       [](std::exception_ptr, coretry::outcome<int> result) {
                         std::cout << coretry::to_string(result.reason) << " after " << result.attempts
                                   << " attempts, value " << result.value.value_or(0) << "\n";
                       });
  io.run();
  // The HTTP client links too; refusing a bad URL needs no network.
  coretry::http::client client(io.get_executor());
  try {
    client.async_send("not a url", coretry::http::request{}, {}, [](std::exception_ptr, coretry::http::result) {});
  } catch (const std::invalid_argument&) {
    return 0;
  }
  return 1;
}
