#ifndef CORETRY_CLI_OUTPUT_FILE_HPP
#define CORETRY_CLI_OUTPUT_FILE_HPP

#include <string>
#include <string_view>

namespace coretry::cli {

/// The -o target, written through a temporary file beside it (same
/// directory, so the final rename is atomic) and renamed into place only on
/// success. Until then the target is untouched; a failure, a cancellation or
/// an exception removes the temporary file.
class output_file {
public:
  /// Creates the temporary file now, so that an unusable target is reported
  /// before any request is sent. Throws usage_error naming the problem.
  explicit output_file(std::string target);
  /// Removes the temporary file unless committed.
  ~output_file();
  output_file(const output_file&) = delete;
  output_file& operator=(const output_file&) = delete;

  /// Writes `content` and renames the file into place. Throws
  /// std::runtime_error naming the problem (the temporary is removed).
  void commit(std::string_view content);
  /// Removes the temporary file now. Safe to call more than once.
  void discard() noexcept;

  const std::string& target() const noexcept { return target_; }

private:
  std::string target_;
  std::string temporary_;
  int fd_ = -1;
};

} // namespace coretry::cli

#endif
