// The per-thread cache that retrying operations and attempt runners live in
// when their handler names no allocator: a freed block is reused by the next
// operation on the thread, only a few small blocks are kept, a block freed on
// another thread is kept there, and a thread's end frees its cache (a block
// freed after that goes straight back to the heap).

#include "test_support.hpp"

#include <coretry/detail/block_cache.hpp>

#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

using namespace coretry_tests;
using coretry::detail::block_cache;

namespace {

/// Empties this thread's cache, so that a case starts from nothing.
void drain() { block_cache::release_cached(); }

/// An attempt that completes at once (through the executor) with `value`.
template <class T = int>
auto immediate_attempt(asio::io_context& io, T value = T{7}) {
  return asio::async_initiate<const asio::deferred_t&, void(boost::system::error_code, T)>(
      [&io, value](auto handler) {
        asio::post(io, [h = std::move(handler), value]() mutable { std::move(h)(boost::system::error_code{}, value); });
      },
      asio::deferred);
}

} // namespace

TEST_CASE("block cache: a freed block is the next one of its size handed out on its thread, and no other size's") {
  drain();
  void* a = block_cache::allocate(600);
  block_cache::deallocate(a, 600);
  CHECK(block_cache::cached() == 1);
  void* b = block_cache::allocate(600);
  CHECK(b == a);
  CHECK(block_cache::cached() == 0);
  block_cache::deallocate(b, 600);
  // A smaller request does not take it (it would come back as a smaller
  // block), nor does a larger one.
  void* small = block_cache::allocate(200);
  void* large = block_cache::allocate(800);
  CHECK(small != a);
  CHECK(large != a);
  CHECK(block_cache::cached() == 1);
  block_cache::deallocate(small, 200);
  block_cache::deallocate(large, 800);
  CHECK(block_cache::cached() == 3);
  CHECK(block_cache::allocate(600) == a);
  block_cache::deallocate(a, 600);
  drain();
}

TEST_CASE("block cache: it keeps at most its few slots, and no block larger than its limit") {
  drain();
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < block_cache::slots + 3; ++i) blocks.push_back(block_cache::allocate(64));
  for (void* p : blocks) block_cache::deallocate(p, 64);
  CHECK(block_cache::cached() == block_cache::slots);
  drain();
  void* big = block_cache::allocate(block_cache::largest + 1);
  block_cache::deallocate(big, block_cache::largest + 1);
  CHECK(block_cache::cached() == 0);
}

TEST_CASE("block cache: a block of a size it holds none of takes a slot when all are full") {
  drain();
  // Every slot holds a block of another size.
  std::vector<void*> others;
  for (std::size_t i = 0; i < block_cache::slots; ++i) others.push_back(block_cache::allocate(100 + i));
  for (std::size_t i = 0; i < block_cache::slots; ++i) block_cache::deallocate(others[i], 100 + i);
  CHECK(block_cache::cached() == block_cache::slots);
  // Operations of a new size: from the second on, each takes the block the
  // one before it freed.
  void* first = block_cache::allocate(700);
  block_cache::deallocate(first, 700);
  CHECK(block_cache::cached() == block_cache::slots);
  void* second = block_cache::allocate(700);
  CHECK(second == first);
  CHECK(block_cache::cached() == block_cache::slots - 1); // taken from the cache, not the heap
  block_cache::deallocate(second, 700);
  // One of the sizes already held: given back, the others stay.
  void* again = block_cache::allocate(700);
  void* extra = block_cache::allocate(700);
  block_cache::deallocate(again, 700);
  block_cache::deallocate(extra, 700);
  CHECK(block_cache::cached() == block_cache::slots);
  CHECK(block_cache::allocate(700) == again);
  block_cache::deallocate(again, 700);
  drain();
}

TEST_CASE("block cache: async_retry's operation and runner go back to the thread's cache when the handler has no allocator") {
  asio::io_context io(1);
  drain();
  const coretry::policy p;
  const coretry::retry_options o = idempotent();
  std::optional<coretry::outcome<int>> result;
  coretry::async_retry(io.get_executor(), p, o, [&io](const auto&) { return immediate_attempt(io); },
                       [&](std::exception_ptr, coretry::outcome<int> r) { result = std::move(r); });
  io.run();
  REQUIRE(result);
  CHECK(result->succeeded());
  // The operation's block and its attempt runner's.
  CHECK(block_cache::cached() == 2);
  io.restart();
  coretry::async_retry(io.get_executor(), p, o, [&io](const auto&) { return immediate_attempt(io); },
                       [&](std::exception_ptr, coretry::outcome<int> r) {
                         // The operation's block is back before the handler runs.
                         CHECK(block_cache::cached() == 2);
                         result = std::move(r);
                       });
  // The next operation takes the cached block back.
  CHECK(block_cache::cached() < 2);
  io.run();
  CHECK(result->succeeded());
  drain();
}

namespace {
struct alignas(64) wide {
  int value = 0;
};
} // namespace

TEST_CASE("block cache: an over-aligned result keeps Asio's aligning allocator, and its operation works") {
  asio::io_context io(1);
  drain();
  const coretry::policy p;
  const coretry::retry_options o = idempotent();
  std::optional<coretry::outcome<wide>> result;
  coretry::async_retry(io.get_executor(), p, o, [&io](const auto&) { return immediate_attempt(io, wide{9}); },
                       [&](std::exception_ptr, coretry::outcome<wide> r) { result = std::move(r); });
  io.run();
  REQUIRE(result);
  REQUIRE(result->succeeded());
  CHECK(result->value->value == 9);
  CHECK(reinterpret_cast<std::uintptr_t>(&*result->value) % 64 == 0);
  CHECK(block_cache::cached() == 0);
}
