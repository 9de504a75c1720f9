// book_detail: the book-detail read of the specification, on real timers.
//
// A fake pricing dependency hangs on the first two calls and answers the third
// after 210 ms. The policy is the default one (3 attempts, 1000 ms overall,
// 250 ms per attempt, 100 ms minimum, 50 ms reserve, full jitter on windows
// of 100 then 200 ms). With --seed-draws the jitter draws are the seed's (40
// and 140 ms) and the run finishes near 890 ms; by default they are random.
// A second run shows a 503 with Retry-After: 1 arriving 100 ms into the
// operation: the client stops at once instead of shortening the server's delay.

#include <coretry/coretry.hpp>
#include <coretry/testing/manual_clock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <cstring>
#include <string>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using steady_context = coretry::attempt_context<std::chrono::steady_clock>;

namespace {

double in_ms(coretry::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

/// Prints the operation's timeline as it happens.
class timeline final : public coretry::retry_observer {
public:
  void attempt_started(const coretry::attempt_started_event& e) noexcept override {
    std::printf("  %7.1f ms  attempt %u starts, allowance %.0f ms\n", in_ms(e.at), e.attempt, in_ms(e.allowance));
  }
  void attempt_finished(const coretry::attempt_finished_event& e) noexcept override {
    std::printf("  %7.1f ms  attempt %u ends: %s\n", in_ms(e.record.end), e.record.number,
                std::string(e.record.classified.category).c_str());
  }
  void backoff_scheduled(const coretry::backoff_event& e) noexcept override {
    std::printf("  %7.1f ms  waiting %.1f ms (%s)\n", in_ms(e.at), in_ms(e.wait),
                std::string(coretry::to_string(e.source)).c_str());
  }
  void stopped(const coretry::stop_event& e) noexcept override {
    std::printf("  %7.1f ms  stop: %s after %u attempt(s)\n", in_ms(e.at),
                std::string(coretry::to_string(e.reason)).c_str(), e.attempts);
  }
};

/// The pricing service: an HTTP-like status after some time, or a hang.
asio::awaitable<int> pricing_call(std::chrono::milliseconds takes, int status) {
  asio::steady_timer work(co_await asio::this_coro::executor, takes);
  co_await work.async_wait(asio::use_awaitable); // cancelled at the attempt's deadline
  co_return status;
}

struct pricing_classifier {
  coretry::verdict operator()(const boost::system::error_code& ec, int status) const {
    if (ec) return coretry::classify_error(ec);
    if (status == 200) return coretry::verdict::success("http_200");
    if (status == 503) return coretry::verdict::transient("http_503", coretry::delivery::answered, 1s);
    return coretry::verdict::permanent("http_other");
  }
};

} // namespace

int main(int argc, char** argv) {
  const bool seed_draws = argc > 1 && std::strcmp(argv[1], "--seed-draws") == 0;
  if (argc > 1 && !seed_draws) {
    std::fprintf(stderr, "usage: book_detail [--seed-draws]\n");
    return 2;
  }
  asio::io_context io;
  timeline printer;
  bool as_told = false; // both requests ended the way the story says
  coretry::testing::scripted_random seed{0.4, 0.7};
  coretry::retry_options options;
  options.safety = coretry::repeat_safety::idempotent; // a GET
  options.observer = &printer;
  options.operation = "/books/{id}";
  if (seed_draws) options.random = &seed;
  const coretry::policy book_detail; // the defaults are the specification's policy

  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        std::printf("GET /books/42: pricing hangs twice, then answers in 210 ms\n");
        int call = 0;
        auto flaky = [&](steady_context) { return ++call < 3 ? pricing_call(10s, 200) : pricing_call(210ms, 200); };
        auto first = co_await coretry::async_retry(io.get_executor(), book_detail, options, flaky,
                                                   pricing_classifier{}, asio::use_awaitable);
        std::printf("  => %s, status %d, %.1f ms, %u attempts, %.1f ms of backoff\n\n",
                    std::string(coretry::to_string(first.reason)).c_str(), first.value.value_or(0),
                    in_ms(first.elapsed), first.attempts, in_ms(first.total_backoff));

        std::printf("GET /books/42: pricing answers 503 with Retry-After: 1 after 100 ms\n");
        auto unavailable = [&](steady_context) { return pricing_call(100ms, 503); };
        options.random = nullptr; // the seed's two draws belong to the first request
        auto second = co_await coretry::async_retry(io.get_executor(), book_detail, options, unavailable,
                                                    pricing_classifier{}, asio::use_awaitable);
        std::printf("  => %s, status %d, %.1f ms: the 1 s delay does not fit the 1000 ms deadline\n",
                    std::string(coretry::to_string(second.reason)).c_str(), second.value.value_or(0),
                    in_ms(second.elapsed));
        as_told = first.reason == coretry::stop_reason::succeeded && first.attempts == 3 &&
                  second.reason == coretry::stop_reason::server_delay_too_long && second.attempts == 1;
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  io.run();
  if (!as_told) std::fprintf(stderr, "book_detail: the requests did not end as described\n");
  return as_told ? 0 : 1;
}
