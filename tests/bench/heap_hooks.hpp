#ifndef CORETRY_BENCH_HEAP_HOOKS_HPP
#define CORETRY_BENCH_HEAP_HOOKS_HPP

// Replaces the C allocator's entry points and operator new/delete so that a
// benchmark sees every block the program takes: from operator new, and
// straight from malloc or aligned_alloc, as Asio's recycling allocator takes
// its blocks when its per-thread cache misses. Include it in exactly one
// source file of a program, which defines the two functions below.

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <malloc.h>
#include <new>

namespace heap_hooks {
/// A block of `bytes` (its usable size) was handed out.
void taken(std::size_t bytes) noexcept;
/// A block of `bytes` was given back.
void given_back(std::size_t bytes) noexcept;
} // namespace heap_hooks

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);

inline void* heap_hooks_taken(void* p) {
  if (p) heap_hooks::taken(malloc_usable_size(p));
  return p;
}

void* malloc(std::size_t size) noexcept { return heap_hooks_taken(__libc_malloc(size)); }
void* calloc(std::size_t n, std::size_t size) noexcept { return heap_hooks_taken(__libc_calloc(n, size)); }
void* realloc(void* p, std::size_t size) noexcept {
  const std::size_t before = p ? malloc_usable_size(p) : 0;
  void* q = __libc_realloc(p, size);
  // On failure the old block is still there; realloc(p, 0) frees it.
  if (p && (q || size == 0)) heap_hooks::given_back(before);
  return heap_hooks_taken(q);
}
void* memalign(std::size_t align, std::size_t size) noexcept { return heap_hooks_taken(__libc_memalign(align, size)); }
void* aligned_alloc(std::size_t align, std::size_t size) noexcept { return heap_hooks_taken(__libc_memalign(align, size)); }
int posix_memalign(void** out, std::size_t align, std::size_t size) noexcept {
  void* p = heap_hooks_taken(__libc_memalign(align, size));
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void free(void* p) noexcept {
  if (p) heap_hooks::given_back(malloc_usable_size(p));
  __libc_free(p);
}
}

void* operator new(std::size_t size) {
  void* p = std::malloc(size == 0 ? 1 : size);
  if (!p) throw std::bad_alloc();
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

#endif
