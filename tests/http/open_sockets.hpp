#ifndef CORETRY_TESTS_HTTP_OPEN_SOCKETS_HPP
#define CORETRY_TESTS_HTTP_OPEN_SOCKETS_HPP

#include <filesystem>
#include <string>

namespace coretry_tests {

/// How many sockets this process has open: a test that compares the count
/// before and after proves that no socket outlived it.
inline std::size_t open_sockets() {
  std::size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(entry.path(), ec).string().rfind("socket:", 0) == 0) ++n;
  }
  return n;
}

} // namespace coretry_tests

#endif
