#ifndef CORETRY_TESTS_FUZZ_CHECK_HPP
#define CORETRY_TESTS_FUZZ_CHECK_HPP

// What every fuzz target reports when an invariant breaks: the condition, its
// line and the input that broke it, printed so that it can be replayed.

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace coretry_fuzz {

/// The input being fuzzed; each target sets it first thing.
inline std::string_view current_input;

inline void print_input() {
  std::fprintf(stderr, "input (%zu bytes): \"", current_input.size());
  for (unsigned char c : current_input) std::fprintf(stderr, c >= 0x20 && c < 0x7f && c != '"' ? "%c" : "\\x%02x", c);
  std::fprintf(stderr, "\"\n");
}

[[noreturn]] inline void fail(const char* file, int line, const char* condition) {
  std::fprintf(stderr, "%s:%d: invariant violated: %s\n", file, line, condition);
  print_input();
  std::abort();
}

} // namespace coretry_fuzz

#define FUZZ_CHECK(condition)                                                                                          \
  do {                                                                                                                 \
    if (!(condition)) ::coretry_fuzz::fail(__FILE__, __LINE__, #condition);                                            \
  } while (false)

#endif
