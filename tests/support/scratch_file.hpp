#ifndef CORETRY_TESTS_SUPPORT_SCRATCH_FILE_HPP
#define CORETRY_TESTS_SUPPORT_SCRATCH_FILE_HPP

// A file of the test's own (a password, a CA certificate), made with a name
// no other test has and removed with the object.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <stdlib.h>
#include <unistd.h>

namespace coretry::test {

struct scratch_file {
  /// Writes `content` as it is into a new file in the temporary directory.
  explicit scratch_file(const std::string& content) {
    std::string pattern = (std::filesystem::temp_directory_path() / "coretry-test-XXXXXX").string();
    const int fd = ::mkstemp(pattern.data());
    REQUIRE(fd >= 0);
    ::close(fd);
    path = pattern;
    std::ofstream(path, std::ios::binary) << content;
  }
  ~scratch_file() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
  scratch_file(const scratch_file&) = delete;
  scratch_file& operator=(const scratch_file&) = delete;
  std::string path;
};

} // namespace coretry::test

#endif
