#include "cli/progress.hpp"

#include "cli/command_line.hpp"

#include <array>

namespace coretry::cli {

progress_line::progress_line(boost::asio::any_io_executor ex, std::FILE* out, bool enabled, std::string label)
    : timer_(std::move(ex)), out_(out), enabled_(enabled), label_(std::move(label)) {}

void progress_line::start() {
  if (!enabled_) return;
  started_ = std::chrono::steady_clock::now();
  timer_.expires_after(quiet_period);
  timer_.async_wait([this](const boost::system::error_code& error) {
    if (!error && !stopped_) draw();
  });
}

void progress_line::attempt_started(unsigned attempt, unsigned max_attempts) {
  state_ = "attempt " + std::to_string(attempt) + " of " + std::to_string(max_attempts);
}

void progress_line::waiting(duration wait) { state_ = "waiting " + describe_duration(wait) + " to retry"; }

void progress_line::clear() {
  if (!shown_) return;
  // Carriage return, then erase to the end of the line.
  std::fputs("\r\x1b[K", out_);
  std::fflush(out_);
  shown_ = false;
}

void progress_line::stop() {
  stopped_ = true;
  timer_.cancel();
  clear();
}

void progress_line::schedule() {
  timer_.expires_after(tick);
  timer_.async_wait([this](const boost::system::error_code& error) {
    if (!error && !stopped_) draw();
  });
}

void progress_line::draw() {
  static constexpr std::array<char, 4> spinner{'|', '/', '-', '\\'};
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  std::fprintf(out_, "\r\x1b[K%c %s  %.1f s  %s", spinner[frame_++ % spinner.size()], label_.c_str(), seconds,
               state_.c_str());
  std::fflush(out_);
  shown_ = true;
  schedule();
}

} // namespace coretry::cli
