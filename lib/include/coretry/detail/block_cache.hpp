#ifndef CORETRY_DETAIL_BLOCK_CACHE_HPP
#define CORETRY_DETAIL_BLOCK_CACHE_HPP

// Where a retrying operation and its attempt runner live when the caller's
// handler names no allocator: a small per-thread cache of freed blocks, kept
// apart from Asio's own recycling cache. Asio's cache holds two blocks a
// thread for every handler it posts; an operation's state (several hundred
// bytes, alive for the whole operation) would take one of them and make the
// small handlers of the attempt itself miss. Here the operation's block is
// reused by the next operation on the same thread instead.
//
// A block freed on another thread goes into that thread's cache. The cache
// keeps at most `slots` blocks of at most `largest` bytes each, and frees
// them when its thread ends; a block freed after that is given straight back.
// When every slot holds a block and none is of the freed block's size, the
// freed block takes a slot in turn (its block goes back to the heap): a
// thread that goes on to operations of another size (another policy's
// parts, another handler) caches theirs, rather than keep the sizes it saw
// first and take every block of the new size from the heap.

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/recycling_allocator.hpp>

#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>

namespace coretry::detail {

class block_cache {
public:
  static constexpr std::size_t slots = 4;
  static constexpr std::size_t largest = 4096;

  /// A block of exactly `size` bytes: a cached one of that size if there is
  /// one (an operation of one type always asks for the same size, and a
  /// block never serves a smaller request, which would lose what it holds).
  static void* allocate(std::size_t size) {
    if (size <= largest) {
      if (cache* c = mine()) {
        for (auto& s : c->slot) {
          if (s.block != nullptr && s.size == size) {
            s.size = 0;
            return std::exchange(s.block, nullptr);
          }
        }
      }
    }
    return ::operator new(size);
  }

  /// `size` is the size that was asked for. Kept when a slot is free, or
  /// in place of another size's block when no slot holds one of this size;
  /// else given back to the heap.
  static void deallocate(void* block, std::size_t size) noexcept {
    if (size <= largest) {
      if (cache* c = mine()) {
        bool held = false; // a block of this size is cached already
        for (auto& s : c->slot) {
          if (s.block == nullptr) {
            s.block = block;
            s.size = size;
            return;
          }
          held = held || s.size == size;
        }
        if (!held) {
          entry& s = c->slot[c->turn];
          c->turn = (c->turn + 1) % slots;
          ::operator delete(s.block);
          s.block = block;
          s.size = size;
          return;
        }
      }
    }
    ::operator delete(block);
  }

  /// How many blocks this thread's cache holds now.
  static std::size_t cached() noexcept {
    cache* c = state() == alive ? mine() : nullptr;
    std::size_t n = 0;
    if (c)
      for (const auto& s : c->slot) n += s.block != nullptr;
    return n;
  }

  /// Gives every block this thread's cache holds back to the heap.
  static void release_cached() noexcept {
    if (cache* c = state() == alive ? mine() : nullptr) {
      for (auto& s : c->slot) {
        ::operator delete(std::exchange(s.block, nullptr));
        s.size = 0;
      }
    }
  }

private:
  struct entry {
    void* block = nullptr;
    std::size_t size = 0;
  };
  struct cache {
    entry slot[slots];
    std::size_t turn = 0; ///< the slot a block of a new size takes next when all are full
    cache() noexcept { state() = alive; }
    ~cache() {
      state() = gone;
      for (auto& s : slot) ::operator delete(s.block);
    }
  };
  enum : unsigned char { unmade, alive, gone };
  // Trivially destructible, so readable while the thread's cache is being
  // destroyed and after.
  static unsigned char& state() noexcept {
    static thread_local unsigned char s = unmade;
    return s;
  }
  static cache* mine() noexcept {
    if (state() == gone) return nullptr;
    static thread_local cache c;
    return &c;
  }
};

/// An allocator over block_cache (stateless: every instance is equal).
/// (For types of at most operator new's alignment: see block_allocator_for.)
template <class T>
struct block_allocator {
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "block_cache blocks have operator new's alignment");
  using value_type = T;
  block_allocator() noexcept = default;
  template <class U>
  block_allocator(const block_allocator<U>&) noexcept {}
  explicit block_allocator(const boost::asio::recycling_allocator<void>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(block_cache::allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { block_cache::deallocate(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const block_allocator<U>&) const noexcept {
    return true;
  }
};

/// A unit of an operation's block whose size depends on what the operation
/// needs (allocated as a count of units of the operation's alignment).
template <std::size_t Align>
struct alignas(Align) block_unit {
  unsigned char bytes[Align];
};

/// The allocator an operation's own block comes from, given the allocator
/// its handlers use: that one when the handler names one, else (Asio's
/// default, the recycling allocator) block_allocator; an over-aligned
/// operation (an over-aligned result or handler) stays with the recycling
/// allocator, which aligns any type.
template <class HandlerAllocator, class T>
using block_allocator_for =
    std::conditional_t<std::is_same_v<HandlerAllocator, boost::asio::recycling_allocator<void>> &&
                           alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__,
                       block_allocator<T>, typename std::allocator_traits<HandlerAllocator>::template rebind_alloc<T>>;

} // namespace coretry::detail

#endif
