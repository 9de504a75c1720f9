#include <coretry/redis/shared_state.hpp>
#include <coretry/redis/credentials.hpp>

#include "exchange_script.hpp"
#include "resp.hpp"

#include <coretry/net/tls.hpp>

#include <coretry/decision_core.hpp>
#include <coretry/random.hpp>
#include <coretry/with_deadline.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <vector>

namespace coretry::redis {

namespace asio = boost::asio;
using detail::reply;
using namespace boost::asio::experimental::awaitable_operators;

namespace {

bool name_ok(std::string_view s, bool colon) noexcept {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.' || (colon && c == ':');
    if (!ok) return false;
  }
  return true;
}

void check(bool ok, const std::string& problem) {
  if (!ok) throw std::invalid_argument("coretry::redis::shared_state: " + problem);
}

long long milliseconds(duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

duration steady_now() { return std::chrono::steady_clock::now().time_since_epoch(); }

// Redis is away for good (for the keys' lifetime): the fleet's bucket and
// process list are forgotten and start again.
constexpr long long key_lifetime_ms = 10 * 60 * 1000;

} // namespace

struct shared_state::impl {
  struct dependency {
    std::string name;
    std::string keys; // PREFIX:{NAME}:
    std::shared_ptr<leased_budget> budget;
    std::shared_ptr<local_gate> gate;
    gate_model::counts published{}; // the gate's recorded() as last sent
    std::uint64_t openings = 0;     // the gate's openings() as last told to the fleet
    duration last{};                // when the last exchange succeeded (steady clock)
    bool bucket_full = false;       // the fleet's bucket was full at the last exchange
    bool fleet_failing = false;     // the other processes had failures in the window
  };

  impl(asio::any_io_executor ex, options o)
      : strand(asio::make_strand(std::move(ex))), opts(std::move(o)),
        phase(static_cast<double>(std::hash<std::string>{}(opts.process_id) & 0xffffffffu) / 4294967296.0) {
    // Made once, and only for rediss://: the system's trust store is costly
    // to load.
    if (opts.server.tls) tls.emplace(net::make_client_context(opts.tls));
  }

  asio::strand<asio::any_io_executor> strand;
  options opts;
  std::optional<asio::ssl::context> tls;
  // Where this process's gates take their first slot after closing, in a
  // fleet slot interval (from its name: the fleet's members differ).
  double phase;
  std::vector<dependency> deps;
  std::atomic<bool> started{false};
  std::atomic<bool> stopping{false};
  std::atomic<bool> up{false};
  std::atomic<std::uint64_t> fallbacks{0}, exchanges{0};
  asio::cancellation_signal cancel; // used on the strand only
  // The reconciler's own (on the strand).
  bool sharing = true; // the budgets start shared, with empty leases
  std::string sha;
  std::vector<std::string> told; // problems told since sharing last resumed

  // Tells `message` unless it was told since sharing last resumed (an
  // empty message: sharing resumed). Problems that take turns (a TLS 1.3
  // refusal read as its alert or as the reset after it) are told once each.
  void tell(std::string_view message) {
    if (stopping.load(std::memory_order_acquire)) return;
    if (message.empty()) {
      if (told.empty()) return;
      told.clear();
    } else {
      if (std::find(told.begin(), told.end(), message) != told.end()) return;
      if (told.size() >= 8) told.erase(told.begin());
      told.emplace_back(message);
    }
    if (opts.on_problem) {
      try {
        opts.on_problem(message);
      } catch (...) {
      }
    }
  }

  // Every budget and gate local, with nothing told (stopping). Thread-safe.
  void make_local() noexcept {
    up.store(false, std::memory_order_release);
    const duration now = steady_now();
    for (auto& d : deps) {
      if (d.budget) d.budget->exchange_failed();
      if (d.gate) d.gate->set_fleet({}, 1, now);
    }
  }

  // Counted before the budgets turn local, so that whoever sees up() false
  // sees the fall back counted; told after (on_problem may take its time).
  void fall_back(std::string_view problem) {
    if (sharing) fallbacks.fetch_add(1, std::memory_order_relaxed);
    make_local();
    sharing = false;
    tell(problem);
  }

  template <class T>
  asio::awaitable<T> within(duration limit, asio::awaitable<T> op) {
    auto outcome = co_await async_with_deadline<T>(
        strand, instant_after(std::chrono::steady_clock::now(), limit), std::move(op), asio::use_awaitable);
    if (outcome.exception) std::rethrow_exception(outcome.exception);
    if (outcome.error) throw boost::system::system_error(outcome.error);
    co_return std::move(*outcome.value);
  }

  static std::vector<std::string> load_command() { return {"SCRIPT", "LOAD", detail::exchange_script}; }

  // Loads the exchange script and keeps its SHA1 for EVALSHA.
  asio::awaitable<void> load_script(detail::connection& conn) {
    const reply r = co_await conn.command(load_command());
    if (r.type != reply::kind::string || r.text.size() != 40)
      throw detail::protocol_error("Redis did not load the exchange script" +
                                   (r.type == reply::kind::error ? ": " + detail::printable(r.text) : std::string()));
    sha = r.text;
  }

  asio::awaitable<int> connect(detail::connection& conn) {
    co_await conn.open(opts.server);
    co_await load_script(conn);
    co_return 0;
  }

  asio::awaitable<reply> run_script(detail::connection& conn, std::vector<std::string> args) {
    reply r = co_await conn.command(args);
    if (r.type == reply::kind::error && r.text.rfind("NOSCRIPT", 0) == 0) {
      // The server forgot it (SCRIPT FLUSH): load it again, once.
      co_await load_script(conn);
      args[1] = sha;
      r = co_await conn.command(args);
    }
    co_return r;
  }

  // EVALSHA's arguments for one dependency (see exchange_script.hpp).
  std::vector<std::string> script_arguments(const dependency& d, const leased_budget::request& req,
                                            const gate_model::counts& delta, bool forget) const {
    constexpr auto buckets = static_cast<std::int64_t>(gate_model::buckets);
    const duration gate_width = d.gate ? d.gate->settings().window / buckets : duration::zero();
    const long long stale = 3 * milliseconds(std::max(opts.period, opts.idle_period));
    std::vector<std::string> args;
    args.reserve(18);
    args.push_back("EVALSHA");
    args.push_back(sha);
    args.push_back("2");
    args.push_back(d.keys + "state");
    args.push_back(d.keys + "processes");
    args.push_back(std::to_string(d.budget ? d.budget->capacity_units() : 0));
    args.push_back(std::to_string(req.deposit_units));
    args.push_back(std::to_string(req.want));
    args.push_back(opts.process_id);
    args.push_back(std::to_string(d.gate ? std::max<long long>(1, milliseconds(gate_width)) : 0));
    args.push_back(std::to_string(gate_model::buckets));
    args.push_back(std::to_string(delta.requests));
    args.push_back(std::to_string(delta.accepts));
    args.push_back(forget ? "1" : "0");
    args.push_back(std::to_string(stale));
    // Never shorter than two gate windows: the script refreshes the lifetime
    // once per window bucket.
    args.push_back(std::to_string(std::max<long long>(key_lifetime_ms, d.gate ? 2 * milliseconds(d.gate->settings().window) : 0)));
    args.push_back(d.budget ? "1" : "0");
    return args;
  }

  asio::awaitable<int> exchange(detail::connection& conn, dependency& d) {
    const leased_budget::request req = d.budget ? d.budget->begin_exchange() : leased_budget::request{};
    gate_model::counts recorded{}, delta{};
    bool forget = false;
    std::uint64_t openings = 0;
    if (d.gate) {
      recorded = d.gate->recorded();
      delta = {recorded.requests - d.published.requests, recorded.accepts - d.published.accepts};
      d.published = recorded; // sent once, even if the exchange fails after reaching Redis
      // Sent until an exchange succeeds: forgetting twice loses nothing.
      openings = d.gate->openings();
      forget = openings != d.openings;
    }
    std::vector<std::string> args = script_arguments(d, req, delta, forget);
    const reply r = co_await run_script(conn, std::move(args));
    if (r.type == reply::kind::error)
      throw detail::protocol_error("Redis refused the exchange script: " + detail::printable(r.text));
    if (r.type != reply::kind::array || r.elements.size() != 5)
      throw detail::protocol_error("Redis answered the exchange script with something else than 5 numbers");
    std::vector<long long> v(5);
    for (std::size_t i = 0; i < 5; ++i) {
      if (r.elements[i].type != reply::kind::integer || r.elements[i].integer < 0)
        throw detail::protocol_error("Redis answered the exchange script with something else than 5 numbers");
      v[i] = r.elements[i].integer;
    }
    // Stopped meanwhile: the budgets and gates are local for good.
    if (stopping.load(std::memory_order_acquire)) co_return 0;
    if (d.budget) d.budget->exchange_succeeded(static_cast<unsigned>(std::min<long long>(v[0], req.want)));
    d.last = steady_now();
    d.bucket_full = d.budget && v[4] >= d.budget->capacity_units();
    d.fleet_failing = d.gate && v[2] > v[3];
    if (d.gate) {
      d.openings = openings;
      const unsigned processes = static_cast<unsigned>(std::clamp<long long>(v[1], 1, 1'000'000));
      // The gate opened while this exchange was out: the counts are the
      // window's it has forgotten (the next exchange tells the fleet so).
      const bool opened_meanwhile = d.gate->openings() != openings;
      const gate_model::counts peers =
          opened_meanwhile ? gate_model::counts{}
                           : gate_model::counts{static_cast<std::uint64_t>(v[2]), static_cast<std::uint64_t>(v[3])};
      d.gate->set_fleet(peers, processes, steady_now(), phase);
    }
    // stop() may have made everything local while this was being applied.
    if (stopping.load(std::memory_order_acquire)) make_local();
    co_return 0;
  }

  // Whether `d` has something to exchange now: tokens to lease, deposits
  // the fleet's bucket has room for, gate failures to publish, a gate that
  // is not open or a fleet with failures (its counts must stay fresh), or
  // no exchange for idle_period (the process stays registered and its
  // successes reach the fleet). A fleet in good health thus costs Redis one
  // exchange per process per idle_period, whatever the request rate.
  bool due(const dependency& d, duration now) const {
    if (!sharing || now - d.last >= std::max(opts.idle_period, opts.period)) return true;
    if (d.budget) {
      if (d.budget->leased() < d.budget->settings().max_lease) return true;
      if (!d.bucket_full && d.budget->pending_deposit_units() >= leased_budget::units_per_token) return true;
    }
    if (d.gate) {
      if (!d.gate->is_open() || d.fleet_failing || d.gate->openings() != d.openings) return true;
      const gate_model::counts now_recorded = d.gate->recorded();
      if (now_recorded.requests - now_recorded.accepts != d.published.requests - d.published.accepts) return true;
    }
    return false;
  }

  static asio::awaitable<void> run(std::shared_ptr<impl> self) {
    impl& s = *self;
    detail::connection conn(s.strand, s.tls ? &*s.tls : nullptr);
    asio::steady_timer timer(s.strand);
    unsigned failures = 0;
    random_source& jitter = independent_random::instance();
    while (!s.stopping.load(std::memory_order_acquire)) {
      std::string problem;
      try {
        if (!conn.is_open()) co_await s.within(s.opts.connect_timeout, s.connect(conn));
        const auto started = std::chrono::steady_clock::now();
        bool exchanged = false;
        for (auto& d : s.deps) {
          if (!s.due(d, started.time_since_epoch())) continue;
          co_await s.within(s.opts.period, s.exchange(conn, d));
          s.exchanges.fetch_add(1, std::memory_order_relaxed);
          exchanged = true;
        }
        if (exchanged && !s.stopping.load(std::memory_order_acquire)) {
          s.up.store(true, std::memory_order_release);
          if (!s.sharing) s.tell("");
          s.sharing = true;
          failures = 0;
        }
        // Until the next tick; a connection that turns readable meanwhile
        // was closed by Redis (or sent what nobody asked for): at once a fault.
        timer.expires_at(instant_after(started, s.opts.period));
        const auto woke = co_await (timer.async_wait(asio::use_awaitable) || conn.wait_readable());
        if (woke.index() == 1) throw detail::protocol_error("Redis closed the connection");
        continue;
      } catch (const boost::system::system_error& e) {
        if (s.stopping.load(std::memory_order_acquire)) break;
        if (e.code() == attempt_error::timed_out)
          problem = conn.handshaking() ? "Redis did not finish the TLS handshake in time" : "Redis did not answer in time";
        else if (e.code().category() == asio::error::get_ssl_category())
          problem = "Redis TLS failed: " + detail::printable(e.code().message());
        else
          problem = "Redis unreachable: " + e.code().message();
      } catch (const detail::protocol_error& e) {
        problem = e.what();
      } catch (const std::exception& e) {
        problem = std::string("Redis exchange failed: ") + e.what();
      }
      // Stopped: whatever the cancellation looked like (one error, or a
      // wait and a timer both cancelled), it is not a fault.
      if (s.stopping.load(std::memory_order_acquire)) break;
      conn.close();
      s.fall_back(problem);
      const duration window = backoff_window(s.opts.reconnect, failures < 64 ? failures : 64);
      ++failures;
      timer.expires_after(duration(static_cast<duration::rep>(jitter.uniform(static_cast<std::uint64_t>(window.count())))));
      try {
        co_await timer.async_wait(asio::use_awaitable);
      } catch (const boost::system::system_error&) {
      }
    }
    conn.close();
    // Stopped: every budget and gate is local from now on (not a fault).
    s.make_local();
  }
};

shared_state::shared_state(asio::any_io_executor ex, options opts) {
  if (auto problem = prefix_problem(opts.prefix)) check(false, *problem);
  check(opts.period >= std::chrono::milliseconds(1) && opts.period <= std::chrono::seconds(60),
        "period must be between 1 ms and 60 s");
  check(opts.idle_period >= std::chrono::milliseconds(1) && opts.idle_period <= std::chrono::seconds(60),
        "idle_period must be between 1 ms and 60 s");
  check(opts.connect_timeout >= std::chrono::milliseconds(1) && opts.connect_timeout <= std::chrono::seconds(60),
        "connect_timeout must be between 1 ms and 60 s");
  check(opts.reconnect.initial_window > duration::zero() && opts.reconnect.max_window >= opts.reconnect.initial_window &&
            opts.reconnect.max_window <= std::chrono::minutes(10) && opts.reconnect.multiplier >= 1.0 &&
            opts.reconnect.multiplier <= 100.0,
        "reconnect must have 0 < initial_window <= max_window <= 10 min and a multiplier between 1 and 100");
  check(!opts.server.host.empty(), "no Redis host");
  try {
    use_credentials(opts.server, {}); // the rule, with nothing more from outside
  } catch (const std::invalid_argument& e) {
    check(false, e.what());
  }
  check(opts.server.tls || (opts.tls.ca_file.empty() && opts.tls.cert_file.empty() && opts.tls.key_file.empty() &&
                            opts.tls.key_password.empty()),
        "TLS files are for a rediss:// server");
  // As redis-cli's --cert and --key: a certificate comes with its key file.
  if (!opts.tls.cert_file.empty() && opts.tls.key_file.empty())
    check(false, "a client certificate ('" + opts.tls.cert_file + "') needs its key");
  if (opts.server.tls)
    if (auto problem = net::tls_files_problem(opts.tls)) check(false, *problem);
  if (opts.process_id.empty()) {
    static constexpr char digits[] = "0123456789abcdef";
    auto& random = independent_random::instance();
    for (int i = 0; i < 16; ++i) opts.process_id += digits[random.uniform(15)];
  }
  check(name_ok(opts.process_id, true), "process_id must be 1 to 64 of A-Z a-z 0-9 _ - . :");
  impl_ = std::make_shared<impl>(std::move(ex), std::move(opts));
}

shared_state::~shared_state() { stop(); }

namespace {
shared_state::impl::dependency& add(shared_state::impl& s, std::string_view name, const std::string& keys) {
  if (s.started) throw std::logic_error("coretry::redis::shared_state: dependencies are added before start()");
  check(name_ok(name, false), "a dependency name must be 1 to 64 of A-Z a-z 0-9 _ - .");
  for (auto& d : s.deps)
    if (d.name == name) return d;
  if (s.deps.size() >= 64) throw std::logic_error("coretry::redis::shared_state: at most 64 dependencies");
  s.deps.push_back({std::string(name), keys, nullptr, nullptr, {}, 0});
  return s.deps.back();
}
} // namespace

std::shared_ptr<leased_budget> shared_state::budget(std::string_view dependency, const leased_budget::options& opts) {
  auto& d = add(*impl_, dependency, key_prefix(dependency));
  if (d.budget) throw std::logic_error("coretry::redis::shared_state: the dependency already has a budget");
  d.budget = std::make_shared<leased_budget>(opts);
  return d.budget;
}

std::shared_ptr<local_gate> shared_state::gate(std::string_view dependency, const local_gate::options& opts) {
  auto& d = add(*impl_, dependency, key_prefix(dependency));
  if (d.gate) throw std::logic_error("coretry::redis::shared_state: the dependency already has a gate");
  d.gate = std::make_shared<local_gate>(opts);
  d.openings = d.gate->openings();
  return d.gate;
}

void shared_state::start() {
  if (impl_->started.exchange(true)) throw std::logic_error("coretry::redis::shared_state: already started");
  auto self = impl_;
  asio::dispatch(self->strand, [self] {
    asio::co_spawn(self->strand, impl::run(self), asio::bind_cancellation_slot(self->cancel.slot(), asio::detached));
  });
}

void shared_state::stop() noexcept {
  auto self = impl_;
  if (!self || self->stopping.exchange(true)) return;
  // Local from now on, at once, whether or not the io_context runs again
  // (an exchange that completes later checks `stopping` and applies nothing).
  self->make_local();
  if (!self->started.load(std::memory_order_acquire)) return; // no reconciler will ever run
  try {
    asio::post(self->strand, [self] { self->cancel.emit(asio::cancellation_type::terminal); });
  } catch (...) {
  }
}

bool shared_state::up() const noexcept { return impl_->up.load(std::memory_order_acquire); }
std::uint64_t shared_state::fallbacks() const noexcept { return impl_->fallbacks.load(std::memory_order_relaxed); }
std::uint64_t shared_state::exchanges() const noexcept { return impl_->exchanges.load(std::memory_order_relaxed); }

std::string shared_state::key_prefix(std::string_view dependency) const {
  return impl_->opts.prefix + ":{" + std::string(dependency) + "}:";
}

std::optional<std::string> prefix_problem(std::string_view prefix) {
  if (name_ok(prefix, true)) return std::nullopt;
  return "the key prefix must be 1 to 64 of A-Z a-z 0-9 _ - . :";
}

} // namespace coretry::redis
