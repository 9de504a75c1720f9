#include "server_thread.hpp"

#include <doctest/doctest.h>

#include <boost/system/system_error.hpp>

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

server_fleet::server_fleet(const std::vector<std::string>& addresses) {
  for (int tries = 0; tries < 20 && servers_.empty(); ++tries) {
    unsigned short port = 0;
    try {
      for (const std::string& address : addresses) {
        coretry::faults::fault_server_options o;
        o.listen = address + ":" + std::to_string(port);
        servers_.push_back(std::make_unique<server_thread>(o));
        port = (*servers_.back())->port();
      }
      port_ = port;
    } catch (const boost::system::system_error&) {
      servers_.clear(); // that port is taken on a later address: another
    }
  }
  REQUIRE_FALSE(servers_.empty());
}

} // namespace coretry::test
