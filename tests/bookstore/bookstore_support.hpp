#ifndef CORETRY_TESTS_BOOKSTORE_SUPPORT_HPP
#define CORETRY_TESTS_BOOKSTORE_SUPPORT_HPP

// What the bookstore's test files share: a bookstore in the test's process,
// a blocking GET, and the samples of a /metrics text.

#include "bookstore/bookstore.hpp"

#include <boost/asio/io_context.hpp>

#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace bookstore_tests {

/// The bookstore program under test.
extern const std::string bookstore_program;

/// A bookstore on its own io_context, run by `threads` threads, listening on
/// a free loopback port.
class bookstore_runner {
public:
  explicit bookstore_runner(coretry::bookstore::options opts, unsigned threads = 2);
  ~bookstore_runner();
  bookstore_runner(const bookstore_runner&) = delete;
  bookstore_runner& operator=(const bookstore_runner&) = delete;
  coretry::bookstore::server* operator->() { return &*server_; }
  std::string url(const std::string& target) const { return server_->base_url() + target; }

private:
  boost::asio::io_context io_;
  std::optional<coretry::bookstore::server> server_;
  std::vector<std::thread> threads_;
};

struct http_reply {
  unsigned status = 0;
  std::string body;
  std::map<std::string, std::string> fields;
};

/// A blocking GET on a fresh connection; fails the test on a transport error
/// or no answer within 20 s.
http_reply get(unsigned short port, const std::string& target,
               const std::vector<std::pair<std::string, std::string>>& fields = {});

unsigned short port_of(const std::string& base_url);

/// Fast retries with room: the counts, not the clock, are under test.
coretry::policy quick_policy();

/// A bookstore calling `pricing_url` with quick_policy() and a 20 s deadline.
coretry::bookstore::options options_for(const std::string& pricing_url, bool coordination = true);

/// Every sample of a Prometheus text, "name{labels}" -> value; fails on a
/// line that is neither a comment nor a well-formed sample.
std::map<std::string, double> parse_metrics(const std::string& text);

/// The value of sample `key` ("name{labels}") in `text`; fails the test when
/// there is none.
double metric(const std::string& text, const std::string& key);

} // namespace bookstore_tests

#endif
