// The retry gate's healthy path allocates nothing: while a local_gate is
// open, recording results and asking for retries make no heap allocation.
//
// Counted with a replaced global operator new, so this file is an executable
// of its own (a replacement applies to a whole program), and it is not built
// with the sanitizers, which replace operator new themselves.

#include <coretry/gate.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#error "gate_allocation_test replaces operator new: build it without sanitizers"
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#error "gate_allocation_test replaces operator new: build it without sanitizers"
#endif
#endif

namespace {
// Every allocation through operator new in the process, on any thread.
std::atomic<std::uint64_t> allocations{0};
} // namespace

void* operator new(std::size_t size) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, std::align_val_t align) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  const auto a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, (size + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
namespace coretry_allocation {
/// For the program's other files (phase_allocation_test.cpp).
std::uint64_t allocations_so_far() noexcept { return allocations.load(); }
} // namespace coretry_allocation

void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace std::chrono_literals;
using coretry::attempt_status;
using coretry::duration;
using action = coretry::gate_decision::action;

namespace {

/// Records `calls` results on `gate`, `result(i)` for the i-th, 100 us apart
/// (ten seconds of results, through every bucket of the window), asking for
/// a retry after each: checks that none of it allocated and that every
/// retry was admitted.
template <class Result>
void check_admits_without_allocating(coretry::local_gate& gate, int calls, Result result) {
  int admitted = 0;
  const std::uint64_t before = allocations.load();
  for (int i = 0; i < calls; ++i) {
    const duration now = duration(std::chrono::microseconds(i * 100));
    gate.record(result(i), now);
    if (gate.ask(now, now + 1s, nullptr).what == action::admit) ++admitted;
  }
  const std::uint64_t made = allocations.load() - before;
  CHECK(made == 0);
  CHECK(admitted == calls);
}

} // namespace

TEST_CASE("gate allocations: the counter sees an allocation") {
  const std::uint64_t before = allocations.load();
  void* volatile p = ::operator new(16);
  ::operator delete(p);
  CHECK(allocations.load() - before == 1);
}

TEST_CASE("gate allocations: an open local_gate records and admits without allocating") {
  coretry::local_gate gate;
  constexpr int calls = 100'000;
  check_admits_without_allocating(gate, calls, [](int) { return attempt_status::success; });
  CHECK(gate.is_open());
  CHECK(gate.counts().admitted == std::uint64_t{calls});
}

TEST_CASE("gate allocations: a healthy gate also counts transient failures without allocating") {
  // One failure in four: p = max(0, (n - 2 x 0.75n) / (n + 1)) = 0, open.
  coretry::local_gate gate;
  check_admits_without_allocating(gate, 100'000,
                                  [](int i) { return i % 4 == 3 ? attempt_status::transient : attempt_status::success; });
  CHECK(gate.is_open());
}
