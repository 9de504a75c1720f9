#include "cli/output_file.hpp"

#include "cli/command_line.hpp"

#include <common/quoting.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace coretry::cli {
namespace {

std::string error_text(int error) { return std::strerror(error); }
using coretry::common::quoted;

class output_error_category_impl final : public boost::system::error_category {
public:
  const char* name() const noexcept override { return "coretry.cli.output"; }
  std::string message(int value) const override {
    switch (static_cast<output_error>(value)) {
    case output_error::too_large: return "the body is larger than --max-filesize";
    case output_error::write_failed: return "the output could not be written";
    }
    return "unknown output error";
  }
};

// Whole writes, retried after a signal; false with errno set otherwise.
bool write_all(int fd, const char* data, std::size_t size) {
  while (size != 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool writable_directory(const std::string& directory) {
  return ::access(directory.empty() ? "." : directory.c_str(), W_OK | X_OK) == 0;
}

// The system's temporary directory: $TMPDIR when it is an absolute path.
std::string system_temporary_directory() {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string directory = tmpdir && tmpdir[0] == '/' ? tmpdir : "/tmp";
  if (directory.back() != '/') directory += '/';
  return directory;
}

mode_t current_umask() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

} // namespace

const boost::system::error_category& output_error_category() noexcept {
  static const output_error_category_impl category;
  return category;
}

boost::system::error_code make_error_code(output_error e) noexcept {
  return {static_cast<int>(e), output_error_category()};
}

output_file::output_file(std::string target, std::optional<std::uint64_t> max_size)
    : target_(std::move(target)), max_size_(max_size) {
  if (target_.empty()) throw usage_error("-o: the file name is empty");
  struct stat existing{};
  if (::stat(target_.c_str(), &existing) == 0) {
    // stat follows symlinks: this is what the name leads to.
    if (S_ISDIR(existing.st_mode)) throw usage_error("-o: " + quoted(target_) + " is a directory; give a file name");
    kind_ = S_ISREG(existing.st_mode) ? kind::in_place : kind::direct;
  } else if (errno != ENOENT) {
    throw usage_error("-o: cannot use " + quoted(target_) + ": " + error_text(errno));
  } else {
    struct stat link{};
    // A dangling symlink is written through, creating the file it names.
    kind_ = ::lstat(target_.c_str(), &link) == 0 ? kind::in_place : kind::create;
  }

  if (kind_ == kind::direct) {
    // A FIFO blocks here until a reader opens it, as with any writer.
    target_fd_ = ::open(target_.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (target_fd_ < 0) throw usage_error("-o: cannot write " + quoted(target_) + ": " + error_text(errno));
    direct_ = true;
    return;
  }
  if (kind_ == kind::in_place && ::access(target_.c_str(), F_OK) == 0 && ::access(target_.c_str(), W_OK) != 0)
    throw usage_error("-o: cannot write " + quoted(target_) + ": " + error_text(errno));

  const auto slash = target_.rfind('/');
  const std::string directory = slash == std::string::npos ? "" : target_.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? target_ : target_.substr(slash + 1);
  // A new file must be created beside its name (the rename is atomic only
  // within one file system); a file written in place may take its body
  // from anywhere.
  const std::string temporary_directory =
      kind_ == kind::create || writable_directory(directory) ? directory : system_temporary_directory();
  // Hidden, and named after the target, so a leftover (after SIGKILL) is recognisable.
  const std::string pattern = temporary_directory + "." + name + ".coretry-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  temporary_fd_ = ::mkostemp(buffer.data(), O_CLOEXEC);
  if (temporary_fd_ < 0)
    throw usage_error("-o: cannot create a file in " +
                      quoted(temporary_directory.empty() ? std::string{"."} : temporary_directory) + ": " +
                      error_text(errno));
  temporary_ = buffer.data();
  // mkstemp makes the file private; a new target gets the usual permissions.
  if (kind_ == kind::create) ::fchmod(temporary_fd_, 0666 & ~current_umask());
}

output_file::~output_file() { discard(); }

void output_file::fail_write(int error) noexcept {
  try {
    failure_ = error_text(error);
  } catch (...) {
  }
}

void output_file::begin_attempt() noexcept {
  attempt_bytes_ = 0;
  failure_.clear();
  start_.clear();
  if (direct_ || temporary_fd_ < 0) return;
  if (::ftruncate(temporary_fd_, 0) != 0 || ::lseek(temporary_fd_, 0, SEEK_SET) != 0) fail_write(errno);
}

boost::system::error_code output_file::write(std::string_view piece) noexcept {
  if (!failure_.empty()) return output_error::write_failed;
  if (max_size_ && piece.size() > *max_size_ - attempt_bytes_) return output_error::too_large;
  const int fd = direct_ ? target_fd_ : temporary_fd_;
  if (fd < 0) {
    fail_write(EBADF);
    return output_error::write_failed;
  }
  if (!write_all(fd, piece.data(), piece.size())) {
    fail_write(errno);
    return output_error::write_failed;
  }
  if (start_.size() < start_size) {
    try {
      start_.append(piece.substr(0, start_size - start_.size()));
    } catch (...) {
    }
  }
  attempt_bytes_ += piece.size();
  if (direct_) direct_bytes_ += piece.size();
  return {};
}

void output_file::copy_into_target() {
  // No O_TRUNC: the same inode, its mode, owner and links stay; the length
  // is set once the new content is in.
  const int target = ::open(target_.c_str(), O_WRONLY | O_CREAT | O_NOCTTY | O_CLOEXEC, 0666);
  if (target < 0) throw std::runtime_error("cannot write '" + target_ + "': " + error_text(errno));
  std::vector<char> buffer(64 * 1024);
  off_t copied = 0;
  int error = 0;
  if (::lseek(temporary_fd_, 0, SEEK_SET) != 0) error = errno;
  while (error == 0) {
    const ssize_t n = ::read(temporary_fd_, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = errno;
    if (n <= 0) break;
    if (!write_all(target, buffer.data(), static_cast<std::size_t>(n))) error = errno;
    else copied += n;
  }
  if (error == 0 && ::ftruncate(target, copied) != 0) error = errno;
  if (::close(target) != 0 && error == 0) error = errno;
  if (error != 0) throw std::runtime_error("cannot write '" + target_ + "': " + error_text(error));
}

void output_file::commit() {
  try {
    if (!failure_.empty()) throw std::runtime_error("cannot write '" + target_ + "': " + failure_);
    if (direct_) {
      const int fd = target_fd_;
      target_fd_ = -1;
      if (::close(fd) != 0) throw std::runtime_error("cannot write '" + target_ + "': " + error_text(errno));
      return;
    }
    if (temporary_fd_ < 0) throw std::runtime_error("-o: the output file was already discarded");
    if (kind_ == kind::in_place) {
      copy_into_target();
      discard();
      return;
    }
    const int fd = temporary_fd_;
    temporary_fd_ = -1;
    if (::close(fd) != 0) throw std::runtime_error("cannot write '" + target_ + "': " + error_text(errno));
    if (std::rename(temporary_.c_str(), target_.c_str()) != 0)
      throw std::runtime_error("cannot rename the output into '" + target_ + "': " + error_text(errno));
    temporary_.clear();
  } catch (...) {
    discard();
    throw;
  }
}

void output_file::discard() noexcept {
  if (temporary_fd_ >= 0) {
    ::close(temporary_fd_);
    temporary_fd_ = -1;
  }
  if (target_fd_ >= 0) {
    ::close(target_fd_);
    target_fd_ = -1;
  }
  if (!temporary_.empty()) {
    ::unlink(temporary_.c_str());
    temporary_.clear();
  }
}

} // namespace coretry::cli
