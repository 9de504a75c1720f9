#include "cli/output_file.hpp"

#include "cli/command_line.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace coretry::cli {
namespace {

std::string error_text(int error) { return std::strerror(error); }

} // namespace

output_file::output_file(std::string target) : target_(std::move(target)) {
  if (target_.empty()) throw usage_error("-o: the file name is empty");
  struct stat existing{};
  if (::stat(target_.c_str(), &existing) == 0 && S_ISDIR(existing.st_mode))
    throw usage_error("-o: '" + target_ + "' is a directory; give a file name");

  const auto slash = target_.rfind('/');
  const std::string directory = slash == std::string::npos ? "" : target_.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? target_ : target_.substr(slash + 1);
  // Hidden, and named after the target, so a leftover (after SIGKILL) is recognisable.
  std::string pattern = directory + "." + name + ".coretry-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  fd_ = ::mkstemp(buffer.data());
  if (fd_ < 0)
    throw usage_error("-o: cannot create a file in '" + (directory.empty() ? std::string{"."} : directory) +
                      "': " + error_text(errno));
  temporary_ = buffer.data();
  // mkstemp makes the file private; the target gets the usual permissions.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd_, 0666 & ~mask);
}

output_file::~output_file() { discard(); }

void output_file::commit(std::string_view content) {
  if (fd_ < 0) throw std::runtime_error("-o: the output file was already discarded");
  std::size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd_, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      discard();
      throw std::runtime_error("cannot write '" + target_ + "': " + error_text(error));
    }
    written += static_cast<std::size_t>(n);
  }
  if (::close(fd_) != 0) {
    const int error = errno;
    fd_ = -1;
    discard();
    throw std::runtime_error("cannot write '" + target_ + "': " + error_text(error));
  }
  fd_ = -1;
  if (std::rename(temporary_.c_str(), target_.c_str()) != 0) {
    const int error = errno;
    discard();
    throw std::runtime_error("cannot rename the output into '" + target_ + "': " + error_text(error));
  }
  temporary_.clear();
}

void output_file::discard() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temporary_.empty()) {
    ::unlink(temporary_.c_str());
    temporary_.clear();
  }
}

} // namespace coretry::cli
