#ifndef CORETRY_CLI_OUTPUT_FILE_HPP
#define CORETRY_CLI_OUTPUT_FILE_HPP

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace coretry::cli {

/// Why writing a piece of the body to -o failed.
enum class output_error {
  too_large = 1, ///< more bytes than --max-filesize
  write_failed,  ///< the file system refused (output_file::failure() says why)
};
const boost::system::error_category& output_error_category() noexcept;
boost::system::error_code make_error_code(output_error e) noexcept;

/// The -o target. Each attempt's body streams, as it arrives, into a
/// temporary file (in the target's directory when that is writable, else in
/// the system's temporary directory), so memory stays bounded whatever the
/// size; the target is touched only on success:
/// - a target that does not exist: the temporary file, created with mode
///   0666 & ~umask beside it, is renamed into place;
/// - an existing regular file (or a symlink to one, or a dangling symlink):
///   written in place through the name, so it keeps its inode, mode, owner
///   and hard links, and a symlink stays a symlink to the file written;
/// - a FIFO, character or block device or socket (-o /dev/null,
///   /dev/stdout on a pipe): written directly as the bytes arrive, since it
///   can be neither replaced nor rewound. Once bytes went there, a failed
///   attempt cannot be taken back (wrote_directly()), so it is not retried.
/// A failure, a cancellation or an exception removes the temporary file.
class output_file {
public:
  /// Checks the target and opens what it needs now, so that an unusable one
  /// is reported before any request is sent. Throws usage_error naming the
  /// problem. `max_size`: --max-filesize.
  output_file(std::string target, std::optional<std::uint64_t> max_size);
  /// How many of a body's first bytes attempt_start() keeps.
  static constexpr std::size_t start_size = 512;
  /// Removes the temporary file unless committed.
  ~output_file();
  output_file(const output_file&) = delete;
  output_file& operator=(const output_file&) = delete;

  /// A new attempt begins: what an earlier attempt left in the temporary
  /// file is dropped (bytes written directly stay written).
  void begin_attempt() noexcept;
  /// Appends one piece of the current attempt's body. Errors:
  /// output_error::too_large past max_size (nothing of the piece written),
  /// output_error::write_failed when the file system refuses.
  boost::system::error_code write(std::string_view piece) noexcept;
  /// Whether bytes went to a target that cannot take them back.
  bool wrote_directly() const noexcept { return direct_ && direct_bytes_ != 0; }
  /// Bytes of the current attempt's body so far, and the first of them.
  std::uint64_t attempt_bytes() const noexcept { return attempt_bytes_; }
  const std::string& attempt_start() const noexcept { return start_; }
  /// The system's reason for the last write_failed ("No space left on device").
  const std::string& failure() const noexcept { return failure_; }
  std::optional<std::uint64_t> max_size() const noexcept { return max_size_; }

  /// Puts the current attempt's body in place (see above). Throws
  /// std::runtime_error naming the problem (the temporary is removed).
  void commit();
  /// Removes the temporary file now. Safe to call more than once.
  void discard() noexcept;

  const std::string& target() const noexcept { return target_; }

private:
  enum class kind { create, in_place, direct };

  void fail_write(int error) noexcept;
  void copy_into_target();

  std::string target_;
  std::optional<std::uint64_t> max_size_;
  kind kind_ = kind::create;
  bool direct_ = false;
  std::string temporary_; ///< its name, while it exists
  int temporary_fd_ = -1;
  int target_fd_ = -1;    ///< in place: opened at the start; direct: written to
  std::uint64_t attempt_bytes_ = 0;
  std::uint64_t direct_bytes_ = 0;
  std::string failure_;
  std::string start_; ///< the first bytes of the current attempt's body (for --json)
};

} // namespace coretry::cli

template <>
struct boost::system::is_error_code_enum<coretry::cli::output_error> : std::true_type {};

#endif
