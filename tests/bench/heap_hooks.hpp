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
/// A block was handed out (never null).
void taken(void* block) noexcept;
/// A block is about to be given back (never null).
void given_back(void* block) noexcept;
} // namespace heap_hooks

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);

inline void* heap_hooks_taken(void* p) {
  if (p) heap_hooks::taken(p);
  return p;
}

void* malloc(std::size_t size) noexcept { return heap_hooks_taken(__libc_malloc(size)); }
void* calloc(std::size_t n, std::size_t size) noexcept { return heap_hooks_taken(__libc_calloc(n, size)); }
void* realloc(void* p, std::size_t size) noexcept {
  if (p) heap_hooks::given_back(p);
  return heap_hooks_taken(__libc_realloc(p, size));
}
void* aligned_alloc(std::size_t align, std::size_t size) noexcept { return heap_hooks_taken(__libc_memalign(align, size)); }
int posix_memalign(void** out, std::size_t align, std::size_t size) noexcept {
  void* p = heap_hooks_taken(__libc_memalign(align, size));
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void free(void* p) noexcept {
  if (p) heap_hooks::given_back(p);
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
