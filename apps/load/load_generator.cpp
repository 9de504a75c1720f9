#include "load/load_generator.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <sys/resource.h>
#include <sys/socket.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <memory>

namespace coretry::load {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;

// ---- arrivals

arrival_schedule::arrival_schedule(std::vector<phase> phases, std::uint64_t seed)
    : phases_(std::move(phases)), random_(seed) {
  starts_.push_back(0);
  for (const phase& each : phases_)
    starts_.push_back(starts_.back() + std::chrono::duration<double>(each.length).count());
}

double arrival_schedule::uniform() { return static_cast<double>(random_() >> 11) * 0x1.0p-53; }

std::optional<arrival_schedule::arrival> arrival_schedule::next() {
  // The process is memoryless: at a phase's end the next gap is drawn anew
  // at the next phase's rate, which makes the piecewise process exact.
  while (phase_ < phases_.size()) {
    const double end = starts_[phase_ + 1];
    const double rate = phases_[phase_].rate;
    if (rate > 0) {
      const double gap = -std::log1p(-uniform()) / rate;
      if (now_ + gap < end) {
        now_ += gap;
        return arrival{std::chrono::nanoseconds{static_cast<std::int64_t>(now_ * 1e9)}, phase_};
      }
    }
    now_ = end;
    ++phase_;
  }
  return std::nullopt;
}

std::chrono::nanoseconds arrival_schedule::phase_start(std::size_t index) const {
  return std::chrono::nanoseconds{static_cast<std::int64_t>(starts_[std::min(index, phases_.size())] * 1e9)};
}

// ---- latencies

namespace {

// Microseconds below 32 have a bucket each; above, 32 buckets per power of two.
std::size_t bucket_of(std::uint64_t micros, std::size_t buckets) {
  if (micros < 32) return static_cast<std::size_t>(micros);
  const int exponent = std::bit_width(micros) - 1; // >= 5
  const std::size_t index = static_cast<std::size_t>(exponent - 4) * 32 + ((micros >> (exponent - 5)) - 32);
  return std::min(index, buckets - 1);
}

double bucket_middle_micros(std::size_t index) {
  if (index < 32) return static_cast<double>(index);
  const int exponent = static_cast<int>(index / 32) + 4;
  const double low = std::ldexp(static_cast<double>(index % 32 + 32), exponent - 5);
  const double width = std::ldexp(1.0, exponent - 5);
  return low + width / 2;
}

} // namespace

void latency_histogram::add(std::chrono::nanoseconds latency) {
  const auto micros = static_cast<std::uint64_t>(std::max<std::int64_t>(0, latency.count() / 1000));
  ++counts_[bucket_of(micros, buckets)];
  ++count_;
}

std::optional<double> latency_histogram::quantile_ms(double q) const {
  if (count_ == 0) return std::nullopt;
  const auto rank = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count_))));
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < buckets; ++i) {
    seen += counts_[i];
    if (seen >= rank) return bucket_middle_micros(i) / 1000;
  }
  return bucket_middle_micros(buckets - 1) / 1000;
}

void latency_histogram::clear() {
  counts_.fill(0);
  count_ = 0;
}

double window_report::goodput() const {
  const double seconds = std::chrono::duration<double>(length).count();
  return seconds > 0 ? static_cast<double>(status_200) / seconds : 0;
}

std::optional<double> window_report::non200_fast_share() const {
  const std::uint64_t others = status_503 + status_504 + status_other;
  if (others == 0) return std::nullopt;
  return static_cast<double>(non200_fast) / static_cast<double>(others);
}

// ---- the generator

namespace {

constexpr auto nothrow_awaitable = asio::as_tuple(asio::use_awaitable);
constexpr std::chrono::milliseconds fast_answer{10};
// An answer's bounds: a load test's answers are small, and each of up to
// most_connections connections may hold one (with its read buffer).
constexpr std::size_t most_response_body = 64 * 1024;
constexpr std::size_t most_response_header = 8 * 1024;
constexpr std::size_t read_buffer_bytes = 16 * 1024;

double to_ms(clock_type::duration duration) { return std::chrono::duration<double, std::milli>(duration).count(); }

// Whether an idle kept-alive connection may carry a request: nothing
// arrived on it (no stray bytes, no end of stream, no reset).
bool still_usable(tcp::socket& socket) {
  char byte = 0;
  const auto got = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

struct connection {
  explicit connection(asio::io_context& io) : stream(io), buffer(read_buffer_bytes) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  bool connected = false;
};

class generator {
public:
  generator(asio::io_context& io, const plan& load, tcp::endpoint endpoint, const window_sink& sink,
            const std::function<bool()>& stop)
      : io_(io), plan_(load), endpoint_(endpoint), sink_(sink), stop_(stop), schedule_(load.phases, load.seed),
        arrival_timer_(io), window_timer_(io) {
    head_ = "GET " + load.target + " HTTP/1.1\r\nHost: " + load.host_field + "\r\nUser-Agent: coretry-load\r\n";
  }

  run_summary run() {
    started_ = clock_type::now();
    window_start_ = started_;
    live_tasks_ += 2;
    asio::co_spawn(io_, arrivals(), asio::detached);
    asio::co_spawn(io_, windows(), asio::detached);
    // Until every coroutine of this object has ended, not just the load.
    while (!done_ || live_tasks_ > 0) {
      if (io_.stopped()) io_.restart();
      io_.run_one();
    }
    run_summary summary;
    summary.seed = plan_.seed;
    totals_.length = clock_type::now() - started_;
    totals_.p50_ms = all_200_.quantile_ms(0.50);
    totals_.p99_ms = all_200_.quantile_ms(0.99);
    totals_.phase = plan_.phases.size();
    summary.totals = totals_;
    rusage usage{};
    if (::getrusage(RUSAGE_SELF, &usage) == 0)
      summary.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                            static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    return summary;
  }

private:
  bool stopping() const { return stop_ && stop_(); }

  asio::awaitable<void> arrivals() {
    while (!stopping()) {
      const auto next = schedule_.next();
      if (!next) break;
      const auto due = started_ + next->at;
      if (due > clock_type::now()) {
        arrival_timer_.expires_at(due);
        co_await arrival_timer_.async_wait(nothrow_awaitable);
        if (stopping()) break;
      }
      launch(due);
    }
    arrivals_done_ = true;
    finish_if_done();
    --live_tasks_;
  }

  // Each window is reported at its end; the last once nothing is left.
  asio::awaitable<void> windows() {
    for (std::size_t index = 1; !done_; ++index) {
      window_timer_.expires_at(started_ + index * plan_.window);
      co_await window_timer_.async_wait(nothrow_awaitable);
      if (done_) break;
      close_window(clock_type::now());
      if (stopping() && !arrivals_done_) arrival_timer_.cancel();
    }
    --live_tasks_;
  }

  window_report& current() { return window_; }

  void launch(clock_type::time_point due) {
    const double lag = to_ms(clock_type::now() - due);
    window_.max_lag_ms = std::max(window_.max_lag_ms, lag);
    totals_.max_lag_ms = std::max(totals_.max_lag_ms, lag);
    std::unique_ptr<connection> taken;
    while (!idle_.empty() && !taken) {
      taken = std::move(idle_.back());
      idle_.pop_back();
      if (!still_usable(taken->stream.socket())) {
        drop(std::move(taken));
        taken.reset();
      }
    }
    if (!taken) {
      if (open_ >= plan_.connections) {
        ++window_.not_sent;
        ++totals_.not_sent;
        return;
      }
      taken = std::make_unique<connection>(io_);
      ++open_;
    }
    ++window_.sent;
    ++totals_.sent;
    ++outstanding_;
    ++live_tasks_;
    asio::co_spawn(io_, exchange(std::move(taken), due), asio::detached);
  }

  void drop(std::unique_ptr<connection> gone) {
    error_code ignored;
    gone->stream.socket().close(ignored);
    --open_;
  }

  asio::awaitable<void> exchange(std::unique_ptr<connection> conn, clock_type::time_point due) {
    const auto deadline = due + plan_.timeout;
    conn->stream.expires_at(deadline);
    error_code error;
    if (!conn->connected) {
      std::tie(error) = co_await conn->stream.async_connect(endpoint_, nothrow_awaitable);
      if (!error) {
        conn->connected = true;
        conn->stream.socket().set_option(tcp::no_delay(true), error);
      }
    }
    http::response_parser<http::string_body> parser;
    if (!error) {
      std::string request = head_;
      if (plan_.deadline_header) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
        request += "x-coretry-deadline-ms: " + std::to_string(std::max<std::int64_t>(1, left.count())) + "\r\n";
      }
      request += "\r\n";
      std::size_t written = 0;
      std::tie(error, written) = co_await asio::async_write(conn->stream, asio::buffer(request), nothrow_awaitable);
    }
    if (!error) {
      parser.header_limit(static_cast<std::uint32_t>(most_response_header));
      parser.body_limit(most_response_body);
      std::size_t read = 0;
      std::tie(error, read) = co_await http::async_read(conn->stream, conn->buffer, parser, nothrow_awaitable);
    }
    const auto latency = clock_type::now() - due;
    --outstanding_;
    if (error) {
      if (error == beast::error::timeout) {
        ++window_.timeouts;
        ++totals_.timeouts;
      } else {
        ++window_.errors;
        ++totals_.errors;
      }
      drop(std::move(conn));
    } else {
      record(parser.get().result_int(), latency);
      if (parser.get().keep_alive() && idle_.size() < plan_.connections) {
        conn->stream.expires_never();
        idle_.push_back(std::move(conn));
      } else {
        drop(std::move(conn));
      }
    }
    finish_if_done();
    --live_tasks_;
  }

  void record(unsigned status, clock_type::duration latency) {
    for (window_report* report : {&window_, &totals_}) {
      if (status == 200) ++report->status_200;
      else if (status == 503) ++report->status_503;
      else if (status == 504) ++report->status_504;
      else ++report->status_other;
      if (status != 200 && latency <= fast_answer) ++report->non200_fast;
    }
    if (status == 200) {
      window_200_.add(latency);
      all_200_.add(latency);
    }
  }

  void close_window(clock_type::time_point now) {
    window_.index = windows_reported_++;
    window_.start = window_start_ - started_;
    window_.length = now - window_start_;
    // The phase at the window's start.
    std::size_t phase = 0;
    while (phase < plan_.phases.size() && schedule_.phase_start(phase + 1) <= window_.start) ++phase;
    window_.phase = phase;
    window_.rate = phase < plan_.phases.size() ? plan_.phases[phase].rate : 0;
    window_.p50_ms = window_200_.quantile_ms(0.50);
    window_.p99_ms = window_200_.quantile_ms(0.99);
    window_.connections = open_;
    window_.outstanding = outstanding_;
    if (sink_) sink_(window_);
    window_ = window_report{};
    window_200_.clear();
    window_start_ = now;
  }

  void finish_if_done() {
    if (done_ || !arrivals_done_ || outstanding_ > 0) return;
    const auto now = clock_type::now();
    if (now > window_start_) close_window(now);
    done_ = true;
    window_timer_.cancel();
    for (auto& conn : idle_) drop(std::move(conn));
    idle_.clear();
  }

  asio::io_context& io_;
  const plan& plan_;
  const tcp::endpoint endpoint_;
  const window_sink& sink_;
  const std::function<bool()>& stop_;
  arrival_schedule schedule_;
  asio::steady_timer arrival_timer_;
  asio::steady_timer window_timer_;
  std::string head_;

  clock_type::time_point started_{};
  clock_type::time_point window_start_{};
  std::vector<std::unique_ptr<connection>> idle_; // most recently used last; at most plan_.connections
  std::size_t open_ = 0;                          // connections open or opening
  std::size_t outstanding_ = 0;
  bool arrivals_done_ = false;
  bool done_ = false;
  std::size_t live_tasks_ = 0; // coroutines of this object not yet ended
  std::size_t windows_reported_ = 0;
  window_report window_;
  window_report totals_;
  latency_histogram window_200_;
  latency_histogram all_200_;
};

tcp::endpoint resolve(const plan& load) {
  error_code error;
  const auto address = asio::ip::make_address(load.host, error);
  if (!error) return {address, load.port};
  // Once, before the load starts, on this thread (the blocking resolve starts
  // no thread of Asio's).
  asio::io_context io;
  tcp::resolver resolver{io};
  const auto results = resolver.resolve(load.host, std::to_string(load.port));
  return results.begin()->endpoint();
}

} // namespace

run_summary run_load(asio::io_context& io, const plan& load, const window_sink& sink,
                     const std::function<bool()>& stop) {
  generator running{io, load, resolve(load), sink, stop};
  return running.run();
}

} // namespace coretry::load
