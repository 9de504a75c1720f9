// coretry_thread_check: preloaded (LD_PRELOAD) into the test executables of
// the suites without THREADS when CORETRY_CHECK_THREAD_LABELS is on (the dev
// preset). Every thread of a process is started through pthread_create
// (std::thread, Asio's resolver and thread pools alike), so this definition,
// found before the C library's, sees each one: if CORETRY_THREAD_CHECK names
// a suite, the process aborts with the message below. The variables are
// removed at load, so that programs the test starts (a server, a child
// process) are not checked: only the suite's own process is.
#include <dlfcn.h>
#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <cerrno>

namespace {

char suite[256];

__attribute__((constructor)) void read_suite() {
  if (const char* name = std::getenv("CORETRY_THREAD_CHECK")) std::snprintf(suite, sizeof suite, "%s", name);
  ::unsetenv("CORETRY_THREAD_CHECK");
  ::unsetenv("LD_PRELOAD");
}

using create_function = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);

} // namespace

extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attributes, void* (*start)(void*),
                              void* argument) {
  if (suite[0] != '\0') {
    std::fprintf(stderr,
                 "coretry thread check: %s started a thread but its suite is not labelled threads: "
                 "add THREADS to its coretry_test_suite (tests/README.md, \"What CI costs\")\n",
                 suite);
    std::fflush(stderr);
    std::abort();
  }
  static const auto next = reinterpret_cast<create_function>(::dlsym(RTLD_NEXT, "pthread_create"));
  if (next == nullptr) return EAGAIN;
  return next(thread, attributes, start, argument);
}
