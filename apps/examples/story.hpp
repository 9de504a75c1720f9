// The examples' checks: each example prints what it expects as it goes, and
// its exit status says whether every expectation held.

#ifndef CORETRY_EXAMPLES_STORY_HPP
#define CORETRY_EXAMPLES_STORY_HPP

#include <cstdio>
#include <exception>

namespace examples {

class story {
public:
  /// Prints the expectation with "ok" or "FAIL" and remembers a failure.
  void expect(bool ok, const char* what) {
    std::printf("  %s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) ++failures_;
  }

  /// The completion handler of the coroutine telling the story: an exception
  /// that escaped it is a failure too.
  auto on_end() {
    return [this](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        expect(false, ex.what());
      }
    };
  }

  /// 0 when every expectation held, 1 otherwise.
  int exit_status() const { return failures_ == 0 ? 0 : 1; }

private:
  int failures_ = 0;
};

} // namespace examples

#endif
