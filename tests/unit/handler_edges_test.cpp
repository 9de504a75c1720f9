// Two edges of the composed-operation contract, for async_with_deadline and
// async_retry alike: a caller's handler that throws (the exception leaves the
// io_context's run(), as with Asio's own operations, and nothing is lost or
// leaked), and a handler bound to a second io_context while the I/O
// context is destroyed (the operation dies with the I/O context; a
// completion already on its way to the second context carries the outcome
// and nothing of the first).

#include "test_support.hpp"

#include <coretry/with_deadline.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <doctest/doctest.h>

#include <memory>
#include <optional>
#include <stdexcept>

using namespace coretry_tests;

namespace {

auto far_deadline() { return coretry::instant_after(std::chrono::steady_clock::now(), std::chrono::hours(1)); }

/// Completes with (no error, `value`) on the next turn of the handler's
/// executor. Counts its starts in `started` when given.
auto answers(int value, int* started = nullptr) {
  return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code, int)>(
      [value, started](auto handler) {
        if (started) ++*started;
        auto ex = asio::get_associated_executor(handler);
        asio::post(ex, asio::append(std::move(handler), boost::system::error_code(), value));
      },
      asio::deferred);
}

/// Completes with (no error, `value`) on the next turn of the handler's
/// executor, then sets `after`: an operation with work of its own after its
/// handler returns, which a throwing handler must not cut short (the
/// exception leaves run(), as when Asio calls a handler in place).
auto answers_then(int value, bool& after) {
  return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code, int)>(
      [value, &after](auto handler) {
        auto ex = asio::get_associated_executor(handler);
        asio::post(ex, [value, &after, h = std::move(handler)]() mutable {
          std::move(h)(boost::system::error_code(), value);
          after = true;
        });
      },
      asio::deferred);
}

/// Never completes unless cancelled; then completes with operation_aborted.
auto waits_for_cancellation(asio::io_context& io) {
  return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code, int)>(
      [&io](auto handler) {
        auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::hours(2));
        auto slot = asio::get_associated_cancellation_slot(handler);
        auto ex = asio::get_associated_executor(handler);
        timer->async_wait(asio::bind_cancellation_slot(
            slot, asio::bind_executor(ex, [timer, h = std::move(handler)](boost::system::error_code ec) mutable {
              std::move(h)(ec, 0);
            })));
      },
      asio::deferred);
}

coretry::policy one_attempt() {
  coretry::policy p;
  p.max_attempts = 1;
  p.overall_deadline = std::chrono::hours(1);
  p.attempt_limit = std::chrono::hours(1);
  return p;
}

/// Counts the live copies of the handler that holds it.
struct alive {
  explicit alive(std::shared_ptr<int> n) : count(std::move(n)) { ++*count; }
  alive(alive&& other) noexcept : count(other.count) { ++*count; }
  alive(const alive& other) : count(other.count) { ++*count; }
  ~alive() { --*count; }
  std::shared_ptr<int> count;
};

} // namespace

TEST_CASE("handler edges: a handler that throws lets the exception out of run(), once, and the io_context goes on") {
  asio::io_context io; // not single-threaded: each operation runs on a strand of its own
  auto strand = asio::make_strand(io);
  int second = 0;
  SUBCASE("async_with_deadline, on the bare executor") {
    coretry::async_with_deadline<int>(io.get_executor(), far_deadline(), answers(1), [](coretry::deadline_outcome<int>) {
      throw std::runtime_error("thrown by the handler");
    });
  }
  SUBCASE("async_with_deadline, on a strand (called in place)") {
    coretry::async_with_deadline<int>(io.get_executor(), far_deadline(), answers(1),
                                      asio::bind_executor(strand, [](coretry::deadline_outcome<int>) {
                                        throw std::runtime_error("thrown by the handler");
                                      }));
  }
  SUBCASE("async_retry, on the bare executor") {
    coretry::async_retry(io.get_executor(), one_attempt(), [](const auto&) { return answers(1); },
                         [](std::exception_ptr, coretry::outcome<int>) {
                           throw std::runtime_error("thrown by the handler");
                         });
  }
  SUBCASE("async_retry, on a strand") {
    coretry::async_retry(io.get_executor(), one_attempt(), [](const auto&) { return answers(1); },
                         asio::bind_executor(strand, [](std::exception_ptr, coretry::outcome<int>) {
                           throw std::runtime_error("thrown by the handler");
                         }));
  }
  CHECK_THROWS_WITH_AS(io.run(), "thrown by the handler", std::runtime_error);
  // Nothing of the first operation is left, and the next one completes.
  io.restart();
  coretry::async_with_deadline<int>(io.get_executor(), far_deadline(), answers(2),
                                    [&](coretry::deadline_outcome<int> r) { second = r.value.value_or(0); });
  CHECK_NOTHROW(io.run());
  CHECK(second == 2);
}

TEST_CASE("handler edges: a handler that throws, called in place, leaves run() and not the attempt's completion") {
  asio::io_context io(1); // single-threaded: the operation needs no strand, and its handler is called in place
  bool after = false;
  int second = 0;
  coretry::async_retry(io.get_executor(), one_attempt(), [&](const auto&) { return answers_then(1, after); },
                       [](std::exception_ptr, coretry::outcome<int>) {
                         throw std::runtime_error("thrown by the handler");
                       });
  CHECK_THROWS_WITH_AS(io.run(), "thrown by the handler", std::runtime_error);
  CHECK(after); // the attempt's completion went on after the handler threw
  io.restart();
  coretry::async_retry(io.get_executor(), one_attempt(), [&](const auto&) { return answers_then(2, after); },
                       [&](std::exception_ptr, coretry::outcome<int> r) { second = r.value.value_or(0); });
  CHECK_NOTHROW(io.run());
  CHECK(second == 2);
}

TEST_CASE("handler edges: a handler on a second io_context, the I/O context destroyed after the operation ended") {
  asio::io_context handlers;
  auto strand = asio::make_strand(handlers);
  std::optional<int> got;
  int started = 0;
  {
    asio::io_context io;
    SUBCASE("async_with_deadline") {
      coretry::async_with_deadline<int>(io.get_executor(), far_deadline(), answers(9, &started),
                                        asio::bind_executor(strand, [&](coretry::deadline_outcome<int> r) {
                                          CHECK(strand.running_in_this_thread());
                                          got = r.value.value_or(-1);
                                        }));
    }
    SUBCASE("async_retry") {
      coretry::async_retry(io.get_executor(), one_attempt(), [&](const auto&) { return answers(9, &started); },
                           asio::bind_executor(strand, [&](std::exception_ptr, coretry::outcome<int> r) {
                             CHECK(strand.running_in_this_thread());
                             got = r.value.value_or(-1);
                           }));
    }
    // The operation runs on the I/O context and ends there; its completion
    // waits on the second context, which has not run yet.
    io.run();
    CHECK(started == 1); // it ran on the I/O context, not on the handler's
    CHECK_FALSE(got);
  } // the I/O context and its deadline queue are gone
  handlers.run();
  REQUIRE(got);
  CHECK(*got == 9);
}

TEST_CASE("handler edges: a handler on a second io_context, the I/O context destroyed mid-operation") {
  asio::io_context handlers;
  auto strand = asio::make_strand(handlers);
  auto live = std::make_shared<int>(0);
  bool called = false;
  {
    asio::io_context io;
    SUBCASE("async_with_deadline") {
      coretry::async_with_deadline<int>(io.get_executor(), far_deadline(), waits_for_cancellation(io),
                                        asio::bind_executor(strand, [&, a = alive(live)](coretry::deadline_outcome<int>) {
                                          called = true;
                                        }));
    }
    SUBCASE("async_retry") {
      coretry::async_retry(io.get_executor(), one_attempt(), [&io](const auto&) { return waits_for_cancellation(io); },
                           asio::bind_executor(strand, [&, a = alive(live)](std::exception_ptr, coretry::outcome<int>) {
                             called = true;
                           }));
    }
    io.poll();
    handlers.poll(); // nothing for it yet; the work it counts keeps it from running dry
    CHECK(*live == 1);
  } // destroyed with the operation pending: the operation and its handler go with it
  CHECK(*live == 0);
  handlers.run(); // no work is left counted on it, so this returns
  CHECK_FALSE(called);
}
