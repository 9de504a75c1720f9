#include "server_thread.hpp"

#include <doctest/doctest.h>

#include <algorithm>

namespace coretry::test {

server_thread::server_thread(coretry::faults::fault_server_options options, unsigned threads) {
  server_.emplace(io_, std::move(options));
  for (unsigned i = 0; i < threads; ++i) {
    std::packaged_task<void()> run{[this] { io_.run(); }};
    finished_.push_back(run.get_future());
    threads_.emplace_back(std::move(run));
  }
}

server_thread::~server_thread() {
  if (!stop_and_wait()) {
    FAIL_CHECK("the server's io_context still had work after stop()");
    io_.stop();
  }
  for (std::thread& thread : threads_) thread.join();
}

bool server_thread::stop_and_wait(std::chrono::milliseconds timeout) {
  server_->stop();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  return std::all_of(finished_.begin(), finished_.end(), [deadline](const std::future<void>& finished) {
    return finished.wait_until(deadline) == std::future_status::ready;
  });
}

} // namespace coretry::test
