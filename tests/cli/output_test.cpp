// `coretry fetch -o` and the body's size: what happens to the file system
// object -o names (new file, existing file, hard link, symlink, FIFO), a body
// far above the memory limit, --max-filesize, --stdout-limit, and a 5xx body
// rule on a large body. Real program, real servers on loopback.

#include "process.hpp"
#include "raw_server.hpp"

#include <coretry/http/client.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/beast/http/error.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace cli_tests;

namespace {

void write_file(const std::string& path, std::string_view content, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
  REQUIRE(::fchmod(fd, mode) == 0); // whatever the umask
  ::close(fd);
}

struct stat status_of(const std::string& path) {
  struct stat s{};
  REQUIRE(::stat(path.c_str(), &s) == 0);
  return s;
}

struct stat link_status_of(const std::string& path) {
  struct stat s{};
  REQUIRE(::lstat(path.c_str(), &s) == 0);
  return s;
}

std::string pattern(std::uint64_t size) {
  std::string body(size, '\0');
  for (std::uint64_t i = 0; i < size; ++i) body[i] = raw_server::pattern_byte(i);
  return body;
}

/// Sets the process umask (inherited by the program) for one scope.
class umask_scope {
public:
  explicit umask_scope(mode_t mask) : previous_(::umask(mask)) {}
  ~umask_scope() { ::umask(previous_); }
  umask_scope(const umask_scope&) = delete;
  umask_scope& operator=(const umask_scope&) = delete;

private:
  mode_t previous_;
};

/// Everything written to the FIFO `path` until its writer closes it, or
/// what came within 30 s. Opened without blocking, so that a program that
/// never opens the FIFO fails the test instead of hanging it.
std::string read_fifo(const std::string& path) {
  std::string received;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return received;
  const auto until = std::chrono::steady_clock::now() + 30s;
  bool writer_seen = false;
  char buffer[65536];
  while (std::chrono::steady_clock::now() < until) {
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, 100) <= 0) continue;
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      writer_seen = true;
      received.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0 && (writer_seen || (ready.revents & POLLHUP))) {
      break; // the writer closed it
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      break;
    }
  }
  ::close(fd);
  return received;
}

/// What `fetch -o FIFO` did, and what was read from the FIFO meanwhile.
struct fifo_run {
  run_result run;
  std::string received;
};

/// Makes a FIFO at `fifo` and runs `fetch -o FIFO url` while another thread
/// reads it (a FIFO must be read as it is written).
fifo_run fetch_into_fifo(const std::string& fifo, const std::string& url) {
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  fifo_run out;
  std::thread reader([&] { out.received = read_fifo(fifo); });
  out.run = run({"fetch", "-o", fifo, url});
  reader.join();
  return out;
}

/// Largest resident set of the children waited for so far, in KiB.
long children_max_rss_kib() {
  rusage usage{};
  ::getrusage(RUSAGE_CHILDREN, &usage);
  return usage.ru_maxrss;
}

} // namespace

TEST_CASE_FIXTURE(server_and_directory, "cli: -o: a new file gets mode 0666 & ~umask") {
  const std::string target = directory.file("new.txt");
  run_result r;
  {
    umask_scope mask{027};
    r = run({"fetch", "-o", target, server.url("/status/200?body=fresh")});
  }
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(read_file(target) == "fresh");
  CHECK((status_of(target).st_mode & 07777) == 0640);
  CHECK(directory.entries() == std::vector<std::string>{"new.txt"});
}

TEST_CASE_FIXTURE(server_and_directory, "cli: -o: an existing 0600 file is written in place: same inode, same mode") {
  const std::string target = directory.file("secret.txt");
  write_file(target, "an older and much longer content", 0600);
  const struct stat before = status_of(target);
  const auto r = run({"fetch", "-o", target, server.url("/status/200?body=new")});
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(read_file(target) == "new");
  const struct stat after = status_of(target);
  CHECK(after.st_ino == before.st_ino);
  CHECK((after.st_mode & 07777) == 0600);
  CHECK(directory.entries() == std::vector<std::string>{"secret.txt"});
}

TEST_CASE_FIXTURE(server_and_directory, "cli: -o: a hard link to the target stays shared") {
  const std::string target = directory.file("data.txt");
  const std::string alias = directory.file("alias.txt");
  write_file(target, "old", 0644);
  REQUIRE(::link(target.c_str(), alias.c_str()) == 0);
  const auto r = run({"fetch", "-o", target, server.url("/status/200?body=shared")});
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(read_file(alias) == "shared");
  CHECK(status_of(target).st_nlink == 2);
  CHECK(status_of(target).st_ino == status_of(alias).st_ino);
}

TEST_CASE_FIXTURE(server_and_directory, "cli: -o: through a symlink the target is written and the link stays") {
  const std::string real = directory.file("real.txt");
  const std::string link = directory.file("link.txt");
  write_file(real, "old", 0600);
  REQUIRE(::symlink("real.txt", link.c_str()) == 0);
  const auto r = run({"fetch", "-o", link, server.url("/status/200?body=through")});
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(S_ISLNK(link_status_of(link).st_mode));
  CHECK(read_file(real) == "through");
  CHECK((status_of(real).st_mode & 07777) == 0600);

  SUBCASE("a dangling symlink: the file it names is created") {
    const std::string dangling = directory.file("dangling.txt");
    REQUIRE(::symlink("created.txt", dangling.c_str()) == 0);
    const auto again = run({"fetch", "-o", dangling, server.url("/status/200?body=made")});
    INFO(again.err);
    CHECK(again.status == 0);
    CHECK(S_ISLNK(link_status_of(dangling).st_mode));
    CHECK(read_file(directory.file("created.txt")) == "made");
  }
}

TEST_CASE("cli: -o: a FIFO is written directly, and stays a FIFO") {
  temporary_directory directory;
  const std::string fifo = directory.file("pipe");
  const std::uint64_t size = 3 * 1024 * 1024; // more than a pipe holds: it must be read as it is written
  raw_server server([&](unsigned, int fd) { raw_server::send_pattern(fd, size); });
  const fifo_run fed = fetch_into_fifo(fifo, server.url("/big"));
  INFO(fed.run.err);
  CHECK(fed.run.status == 0);
  CHECK(fed.received.size() == size);
  CHECK(fed.received == pattern(size));
  CHECK(S_ISFIFO(link_status_of(fifo).st_mode));
  CHECK(directory.entries() == std::vector<std::string>{"pipe"});
}

TEST_CASE("cli: -o: a body cut short is retried into a file, but not once bytes went to a FIFO") {
  temporary_directory directory;
  // The first answer announces 1 MiB and closes after 100 KiB; later ones are whole.
  const std::uint64_t size = 1024 * 1024;
  raw_server server([&](unsigned n, int fd) { raw_server::send_pattern(fd, size, n == 1 ? 100 * 1024 : size); });

  SUBCASE("a regular file gets only the successful attempt's body") {
    const std::string target = directory.file("out.bin");
    const auto r = run({"fetch", "-o", target, server.url("/cut")});
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(server.requests() == 2);
    CHECK(read_file(target) == pattern(size));
  }
  SUBCASE("a FIFO: rejected after the first attempt, which said why") {
    const fifo_run fed = fetch_into_fifo(directory.file("pipe"), server.url("/cut"));
    INFO(fed.run.err);
    CHECK(fed.run.status == 10);
    CHECK(server.requests() == 1);
    CHECK(fed.run.err.find("output_already_written") != std::string::npos);
    CHECK(fed.received == pattern(100 * 1024));
  }
}

TEST_CASE("cli: -o: a 20 MiB body streams to the file, with memory far below its size") {
  temporary_directory directory;
  const std::uint64_t size = 20 * 1024 * 1024;
  raw_server server([&](unsigned n, int fd) { raw_server::send_pattern(fd, n == 1 ? 10 : size); });
  // The program's own footprint first, on a 10-byte body.
  auto r = run({"fetch", "-o", directory.file("small.bin"), server.url("/small")});
  REQUIRE(r.status == 0);
  const long baseline_kib = children_max_rss_kib();

  const std::string target = directory.file("big.bin");
  r = run({"fetch", "-o", target, server.url("/big")}, 60s);
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(read_file(target) == pattern(size));
  // Held in memory, the body alone would be 20 MiB; streamed, a few read
  // buffers. 8 MiB of headroom absorbs allocator noise, not the body.
  const long peak_kib = children_max_rss_kib();
  CAPTURE(baseline_kib);
  CAPTURE(peak_kib);
  CHECK(peak_kib < baseline_kib + 8 * 1024);
  auto entries = directory.entries();
  std::sort(entries.begin(), entries.end());
  CHECK(entries == std::vector<std::string>{"big.bin", "small.bin"});
}

TEST_CASE("cli: --max-filesize stops a larger body at once, named, not retried, nothing left") {
  temporary_directory directory;
  raw_server server([&](unsigned, int fd) { raw_server::send_pattern(fd, 2 * 1024 * 1024); });
  const std::string target = directory.file("limited.bin");
  SUBCASE("with -o") {
    const auto r = run({"fetch", "--json", "-o", target, "--max-filesize", "1M", server.url("/big")});
    INFO(r.err);
    CHECK(r.status == 10);
    CHECK(server.requests() == 1);
    CHECK(std::string{r.json().at("category").as_string()} == "max_filesize");
    CHECK(r.err.find("--max-filesize") != std::string::npos);
    CHECK(r.err.find("1048576 bytes") != std::string::npos);
    CHECK(directory.entries().empty());
  }
  SUBCASE("on stdout") {
    const auto r = run({"fetch", "--max-filesize", "1048576", server.url("/big")});
    INFO(r.err);
    CHECK(r.status == 10);
    CHECK(server.requests() == 1);
    CHECK(r.out.empty());
    CHECK(r.err.find("--max-filesize") != std::string::npos);
  }
}

TEST_CASE("cli: without -o the body is held in memory up to --stdout-limit, which the error names") {
  const std::uint64_t size = 9 * 1024 * 1024; // above the 8 MiB default
  raw_server server([&](unsigned, int fd) { raw_server::send_pattern(fd, size); });
  auto r = run({"fetch", server.url("/big")});
  CHECK(r.status == 10);
  CHECK(r.out.empty());
  CHECK(r.err.find("--stdout-limit") != std::string::npos);
  CHECK(r.err.find("-o FILE") != std::string::npos);
  r = run({"fetch", "--stdout-limit", "16M", server.url("/big")});
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(r.out == pattern(size));
}

TEST_CASE("cli: --permanent-5xx-body searches a 1 MiB 503 body without crashing") {
  const std::uint64_t size = 1024 * 1024;
  // One line with no line break: std::regex recursed once per character here.
  std::string body(size, 'x');
  body.replace(0, 5, "error");
  std::atomic<bool> refusal{false};
  raw_server server([&](unsigned, int fd) {
    std::string answer = body;
    if (refusal) answer.replace(answer.size() - 8, 8, "HTTP 403");
    raw_server::send_all(fd, "HTTP/1.1 503 Busy\r\nContent-Length: " + std::to_string(answer.size()) +
                                 "\r\nConnection: close\r\n\r\n" + answer);
  });
  SUBCASE("no match: transient, retried") {
    const auto r = run({"fetch", "--json", "--max-attempts", "2", "--backoff-initial", "0", "--permanent-5xx-body",
                        "error.*HTTP 4", server.url("/scrape")});
    INFO(r.err);
    CHECK(r.status == 11);
    CHECK(server.requests() == 2);
  }
  SUBCASE("a match at the very end: permanent") {
    refusal = true;
    const auto r = run({"fetch", "--json", "--max-attempts", "2", "--permanent-5xx-body", "error.*HTTP 4",
                        server.url("/scrape")});
    INFO(r.err);
    CHECK(r.status == 10);
    CHECK(server.requests() == 1);
    CHECK(std::string{r.json().at("category").as_string()} == "upstream_refused");
  }
}

// The library's body sink, which -o stands on, used directly.
namespace {

struct sink_run {
  coretry::http::result result;
  std::string received;
  std::size_t pieces = 0;
  std::size_t largest_piece = 0;
  std::vector<unsigned> chosen; ///< statuses stream_body was asked about
};

sink_run fetch_with_sink(const std::string& url, std::function<boost::system::error_code(std::string_view)> sink,
                         coretry::http::client_options client_options = {}, unsigned attempts = 2) {
  sink_run out;
  boost::asio::io_context io;
  coretry::http::client client(io.get_executor(), client_options);
  coretry::http::request_options options;
  options.policy.max_attempts = attempts;
  options.policy.overall_deadline = std::chrono::seconds(20);
  options.policy.attempt_limit = std::chrono::seconds(10);
  options.stream_body = [&out](const boost::beast::http::response_header<>& header) {
    out.chosen.push_back(header.result_int());
    return header.result_int() == 200;
  };
  options.body_sink = [&out, sink](std::string_view piece) {
    ++out.pieces;
    out.largest_piece = std::max(out.largest_piece, piece.size());
    out.received.append(piece);
    return sink ? sink(piece) : boost::system::error_code{};
  };
  coretry::http::request req{boost::beast::http::verb::get, "", 11};
  client.async_send(url, std::move(req), options, [&out](std::exception_ptr e, coretry::http::result r) {
    REQUIRE_FALSE(e);
    out.result = std::move(r);
  });
  io.run();
  return out;
}

} // namespace

TEST_CASE("library: a body sink gets a body above body_limit piece by piece, none of it in memory") {
  const std::uint64_t size = 12 * 1024 * 1024; // above the 8 MiB body_limit
  raw_server server([&](unsigned, int fd) { raw_server::send_pattern(fd, size); });
  const auto run = fetch_with_sink(server.url("/big"), {});
  REQUIRE(run.result.succeeded());
  CHECK(run.result.value->res->body().empty());
  CHECK(run.received.size() == size);
  CHECK(run.received == pattern(size));
  CHECK(run.pieces > 1);
  CHECK(run.largest_piece <= 64 * 1024 + 8 * 1024); // one read of the connection's buffer at most
  CHECK(run.chosen == std::vector<unsigned>{200});
}

TEST_CASE("library: bodies the chooser declines stay in memory, within body_limit") {
  raw_server server([&](unsigned n, int fd) {
    if (n == 1) raw_server::send_all(fd, "HTTP/1.1 503 Busy\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy");
    else raw_server::send_pattern(fd, 1000);
  });
  SUBCASE("a 503's body is kept, the 200's streamed") {
    const auto run = fetch_with_sink(server.url("/x"), {});
    REQUIRE(run.result.succeeded());
    CHECK(run.chosen == std::vector<unsigned>{503, 200});
    CHECK(run.result.records.size() == 2);
    CHECK(run.received == pattern(1000));
  }
  SUBCASE("a declined body above body_limit is refused as before") {
    coretry::http::client_options small;
    small.body_limit = 3;
    const auto run = fetch_with_sink(server.url("/x"), {}, small);
    CHECK(run.result.reason == coretry::stop_reason::rejected);
    CHECK(run.result.value->error == boost::beast::http::error::body_limit);
    CHECK(server.requests() == 1);
  }
}

TEST_CASE("library: an error from the body sink ends the attempt, permanent by default") {
  raw_server server([&](unsigned, int fd) { raw_server::send_pattern(fd, 1024 * 1024); });
  std::size_t seen = 0;
  const auto run = fetch_with_sink(server.url("/x"), [&seen](std::string_view piece) {
    seen += piece.size();
    return seen > 100 * 1024 ? make_error_code(boost::system::errc::file_too_large) : boost::system::error_code{};
  });
  CHECK(run.result.reason == coretry::stop_reason::rejected);
  CHECK(run.result.value->error == boost::system::errc::file_too_large);
  CHECK(server.requests() == 1);
  CHECK(run.received.size() < 1024 * 1024);
}
