#include "process.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace cli_tests {

std::string read_file(const std::string& path) {
  std::ifstream file{path, std::ios::binary};
  std::ostringstream content;
  content << file.rdbuf();
  return content.str();
}

temporary_directory::temporary_directory() {
  char name[] = "/tmp/coretry-cli-test-XXXXXX";
  if (::mkdtemp(name) == nullptr) throw std::runtime_error(std::string{"mkdtemp: "} + std::strerror(errno));
  path_ = name;
}

temporary_directory::~temporary_directory() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::vector<std::string> temporary_directory::entries() const {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(path_)) names.push_back(entry.path().filename());
  return names;
}

} // namespace cli_tests
