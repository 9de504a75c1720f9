// coretry::redis::shared_state against a real redis-server of the test's own.

#include "redis_server.hpp"

#include <policies.hpp>
#include <skip.hpp>

#include <coretry/redis/shared_state.hpp>
#include <coretry/redis/url.hpp>

#include <doctest/doctest.h>

#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

using namespace redis_tests;
using coretry::leased_budget;
using coretry::local_gate;
using coretry::redis::shared_state;

namespace {

long long info_number(const redis_server& server, const std::string& field) {
  const auto r = server.command({"INFO", "stats"});
  if (!r || r->type != '$') return -1;
  const auto at = r->text.find(field + ":");
  if (at == std::string::npos) return -1;
  return std::stoll(r->text.substr(at + field.size() + 1));
}

} // namespace

TEST_CASE("redis: two processes share one budget, never above capacity plus deposits") {
  REDIS_SERVER_OR_SKIP(server);
  io_thread io;
  shared_state a(io.executor(), fleet_options(server->port(), "process-a", std::chrono::milliseconds(150)));
  shared_state b(io.executor(), fleet_options(server->port(), "process-b", std::chrono::milliseconds(150)));
  auto budget_a = a.budget("pricing", pricing_budget());
  auto budget_b = b.budget("pricing", pricing_budget());
  a.start();
  b.start();
  REQUIRE(eventually([&] { return a.exchanges() > 0 && b.exchanges() > 0; }));

  // Each retry as soon as a token is there: the fleet's bucket is drained
  // as fast as the leases let it (5 tokens per process per exchange).
  const int requests = 1000;
  long retries_a = 0, retries_b = 0;
  const auto drain = [&] {
    while (budget_a->try_acquire_retry()) ++retries_a;
    while (budget_b->try_acquire_retry()) ++retries_b;
  };
  for (int i = 0; i < requests; ++i) {
    (i % 2 == 0 ? budget_a : budget_b)->record_initial_request();
    drain();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // The last deposits go with the next exchanges.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < until) {
    drain();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  a.stop();
  b.stop();
  REQUIRE(eventually([&] { return !budget_a->shared() && !budget_b->shared(); }));
  // The bound holds only while shared: no exchange may have failed.
  REQUIRE(a.fallbacks() == 0);
  REQUIRE(b.fallbacks() == 0);

  // The fleet's bucket starts full (20 tokens) and gets 0.1 token per
  // initial request (exact, in millionths); every token leased out of it is
  // either spent on a retry or still held. A process starts with no lease.
  const long spent = retries_a + retries_b;
  const long held = static_cast<long>(budget_a->leased() + budget_b->leased());
  const long bound = 20 + requests / 10;
  MESSAGE("retries a=" << retries_a << " b=" << retries_b << " held=" << held << " bound=" << bound);
  CHECK(spent + held <= bound);
  CHECK(spent + held >= bound - 10); // deposits reach the fleet's bucket
  CHECK(retries_a > 0);
  CHECK(retries_b > 0);
}

TEST_CASE("redis: a new budget denies retries until its first exchange, then grants") {
  REDIS_SERVER_OR_SKIP(server);
  io_thread io;
  shared_state s(io.executor(), fleet_options(server->port(), "newcomer"));
  auto budget = s.budget("pricing", pricing_budget());
  CHECK(budget->shared());
  CHECK(budget->leased() == 0);
  for (int i = 0; i < 100; ++i) budget->record_initial_request();
  CHECK_FALSE(budget->retry_available());
  CHECK_FALSE(budget->try_acquire_retry()); // its local bucket is full, but it is not local
  CHECK(budget->local_tokens() == doctest::Approx(20.0));
  s.start();
  // up() turns true just after the exchange is counted.
  REQUIRE(eventually([&] { return s.exchanges() > 0 && s.up(); }));
  CHECK(budget->shared());
  CHECK(budget->leased() == 5);
  CHECK(budget->retry_available());
  CHECK(budget->try_acquire_retry());
  CHECK(budget->leased() == 4);
  CHECK(s.fallbacks() == 0);
}

TEST_CASE("redis: a killed Redis turns every budget local at once, a restarted one shares again") {
  const bool tls = tls_subcase();
  REDIS_SERVER_OR_SKIP(server, redis_server::options{.tls = tls});
  // A period a loaded machine keeps to (a slow exchange would be a fall back too).
  fleet_process p{fleet_options(*server, "survivor", tls, std::chrono::milliseconds(200))};
  REQUIRE(eventually([&] { return p.state.up() && p.budget->leased() == 5; }));
  CHECK(p.told.size() == 0);
  REQUIRE(p.budget->try_acquire_retry());
  const unsigned held = p.budget->leased();

  const auto killed = std::chrono::steady_clock::now();
  server->kill();
  REQUIRE(eventually([&] { return !p.state.up() && !p.budget->shared(); }, std::chrono::seconds(5)));
  const double fell_back_ms = since_ms(killed);
  MESSAGE("fell back " << fell_back_ms << " ms after SIGKILL (period 200 ms)");
  CHECK(fell_back_ms <= 1000.0);
  CHECK(p.state.fallbacks() == 1);
  // Told on the reconciler's thread just after the budgets turn local.
  REQUIRE(eventually([&] { return p.told.size() >= 1; }));
  CHECK_FALSE(p.told.all().front().empty());

  // Local: retries are paid from the process's own bucket; the lease is kept.
  const double local = p.budget->local_tokens();
  CHECK(p.budget->try_acquire_retry());
  CHECK(p.budget->local_tokens() == doctest::Approx(local - 1.0));
  CHECK(p.budget->leased() == held);
  std::this_thread::sleep_for(std::chrono::milliseconds(300)); // reconnections fail meanwhile
  CHECK(p.state.fallbacks() == 1);
  CHECK_FALSE(p.state.up());

  server->restart(); // empty, same port
  const auto restarted = std::chrono::steady_clock::now();
  REQUIRE(eventually([&] { return p.state.up() && p.budget->shared(); }, std::chrono::seconds(10)));
  const double resumed_ms = since_ms(restarted);
  MESSAGE("shared again " << resumed_ms << " ms after the restart (reconnect window at most 200 ms)");
  CHECK(resumed_ms <= 2500.0);
  CHECK(p.state.fallbacks() == 1);
  // Sharing resumed is told with an empty message, just after up() turns true.
  CHECK(eventually([&] {
    const auto told = p.told.all();
    return !told.empty() && told.back().empty();
  }));
  REQUIRE(eventually([&] { return p.budget->leased() == 5; }));
  const double local_after = p.budget->local_tokens();
  CHECK(p.budget->try_acquire_retry());
  CHECK(p.budget->leased() == 4); // paid from the lease again (the local bucket pays along, where it can)
  CHECK(p.budget->local_tokens() == doctest::Approx(std::max(0.0, local_after - 1.0)));
}

TEST_CASE("redis: a stopped Redis (SIGSTOP) is a timeout: local, then shared after SIGCONT") {
  const bool tls = tls_subcase();
  REDIS_SERVER_OR_SKIP(server, redis_server::options{.tls = tls});
  fleet_process p{fleet_options(*server, "patient", tls, std::chrono::milliseconds(200))};
  REQUIRE(eventually([&] { return p.state.up(); }));

  const auto paused = std::chrono::steady_clock::now();
  server->pause();
  const bool fell_back = eventually([&] { return !p.state.up() && !p.budget->shared(); }, std::chrono::seconds(5));
  const double fell_back_ms = since_ms(paused);
  server->resume();
  REQUIRE(fell_back);
  MESSAGE("fell back " << fell_back_ms << " ms after SIGSTOP (period 200 ms = exchange deadline)");
  CHECK(fell_back_ms <= 1000.0);
  CHECK(p.state.fallbacks() == 1);
  // Told on the reconciler's thread just after the budgets turn local.
  REQUIRE(eventually([&] { return p.told.size() >= 1; }));
  CHECK(p.told.all().front() == "Redis did not answer in time");

  const auto resumed = std::chrono::steady_clock::now();
  REQUIRE(eventually([&] { return p.state.up() && p.budget->shared(); }, std::chrono::seconds(10)));
  MESSAGE("shared again " << since_ms(resumed) << " ms after SIGCONT");
  CHECK(since_ms(resumed) <= 2500.0);
  CHECK(p.state.fallbacks() == 1);
}

TEST_CASE("redis: FLUSHALL and SCRIPT FLUSH do not stop the sharing (NOSCRIPT reloads the script)") {
  const bool tls = tls_subcase();
  REDIS_SERVER_OR_SKIP(server, redis_server::options{.tls = tls});
  // NOSCRIPT, SCRIPT LOAD and EVALSHA again within one exchange's deadline:
  // a generous one for slow (sanitized) builds.
  fleet_process p{fleet_options(*server, "flushed", tls, std::chrono::milliseconds(250))};
  REQUIRE(eventually([&] { return p.state.exchanges() >= 2; }));

  const auto flushed = server->command({"FLUSHALL"});
  REQUIRE(flushed);
  CHECK(flushed->text == "OK");
  auto n = p.state.exchanges();
  REQUIRE(eventually([&] { return p.state.exchanges() >= n + 3; }));
  const auto budget_key = server->command({"EXISTS", p.state.key_prefix("pricing") + "state"});
  REQUIRE(budget_key);
  CHECK(budget_key->integer == 1); // written again

  const auto scripts = server->command({"SCRIPT", "FLUSH"});
  REQUIRE(scripts);
  CHECK(scripts->text == "OK");
  n = p.state.exchanges();
  REQUIRE(eventually([&] { return p.state.exchanges() >= n + 3; }));
  CHECK(p.state.fallbacks() == 0);
  for (const auto& message : p.told.all()) MESSAGE("problem: " << message);
  CHECK(p.state.up());
  CHECK(p.budget->shared());
  // Loaded again: the cache holds one script.
  const auto memory = server->command({"INFO", "memory"});
  REQUIRE(memory);
  CHECK(memory->text.find("number_of_cached_scripts:1") != std::string::npos);
}

TEST_CASE("redis: a refused password is told once, never shown, and retried quietly") {
  const std::string password = "c0rrect-Horse";
  REDIS_SERVER_OR_SKIP(server, redis_server::options{password});
  auto o = fleet_options(server->port(), "intruder");
  o.server.password = "wr0ng-Battery";
  fleet_process p{o, false};
  const long long before = info_number(*server, "total_connections_received");
  p.state.start();
  REQUIRE(eventually([&] { return !p.budget->shared(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const long long attempts = info_number(*server, "total_connections_received") - before - 1;
  MESSAGE("connections in 1.5 s with a wrong password: " << attempts);
  const auto messages = p.told.all();
  REQUIRE(messages.size() == 1);
  CHECK(messages[0].find("AUTH") != std::string::npos);
  CHECK(messages[0].find("WRONGPASS") != std::string::npos);
  CHECK(messages[0].find("wr0ng") == std::string::npos);
  CHECK(messages[0].find("Battery") == std::string::npos);
  CHECK(messages[0].find("c0rrect") == std::string::npos);
  CHECK_FALSE(p.state.up());
  CHECK(p.state.exchanges() == 0);
  CHECK(p.state.fallbacks() == 1);
  CHECK(attempts >= 3);  // it keeps trying
  CHECK(attempts <= 40); // with backoff (20 ms doubling to 200 ms), not in a loop
  p.state.stop();

  SUBCASE("the password in the URL") {
    auto right = fleet_options(server->port(), "member");
    right.server = coretry::redis::parse_url(server->url());
    shared_state t(p.io.executor(), right);
    auto shared_budget = t.budget("pricing", pricing_budget());
    t.start();
    REQUIRE(eventually([&] { return t.up() && shared_budget->leased() == 5; }));
    CHECK(t.fallbacks() == 0);
  }
  SUBCASE("user and password in the URL") {
    auto right = fleet_options(server->port(), "member");
    right.server =
        coretry::redis::parse_url("redis://default:" + password + "@127.0.0.1:" + std::to_string(server->port()));
    REQUIRE(right.server.user.has_value());
    shared_state t(p.io.executor(), right);
    auto shared_budget = t.budget("pricing", pricing_budget());
    t.start();
    REQUIRE(eventually([&] { return t.up() && shared_budget->leased() == 5; }));
  }
}

TEST_CASE("redis: a gate closes on the fleet's failures and spaces its probes by the fleet's size") {
  REDIS_SERVER_OR_SKIP(server);
  io_thread io;
  const local_gate::options g = coretry::test::fleet_gate();
  shared_state a(io.executor(), fleet_options(server->port(), "failing"));
  shared_state b(io.executor(), fleet_options(server->port(), "healthy"));
  auto gate_a = a.gate("pricing", g);
  auto gate_b = b.gate("pricing", g);
  a.start();
  b.start();
  // Both registered, both told so.
  REQUIRE(eventually([&] { return gate_a->processes() == 2 && gate_b->processes() == 2; }));

  // B saw only two successes: alone it could not be judged (min_requests).
  gate_b->record(coretry::attempt_status::success, steady_now());
  gate_b->record(coretry::attempt_status::success, steady_now());
  for (int i = 0; i < 100; ++i) gate_a->record(coretry::attempt_status::transient, steady_now());
  CHECK_FALSE(gate_a->is_open());
  REQUIRE(eventually([&] { return !gate_b->is_open(); }));
  CHECK(gate_b->processes() == 2);
  CHECK(gate_b->level() == 0);

  // Level 0 with two processes: one slot per 2 x probe_interval.
  const coretry::duration now = steady_now();
  const coretry::duration latest = now + std::chrono::seconds(5);
  // Its first slot is at its own phase of the fleet's slot interval.
  auto first = gate_b->ask(now, latest, nullptr);
  coretry::duration slot = now;
  if (first.what == coretry::gate_decision::action::wait) {
    CHECK(first.at - now <= std::chrono::milliseconds(200));
    slot = first.at;
    first = gate_b->ask(slot, latest, &first);
  }
  REQUIRE(first.what == coretry::gate_decision::action::admit);
  const auto second = gate_b->ask(slot, latest, nullptr);
  REQUIRE(second.what == coretry::gate_decision::action::wait);
  CHECK(second.at - slot == std::chrono::milliseconds(200));
  gate_b->probe_ended(first.ticket);

  // B recovers (two successes per level, one level): it opens, and the
  // fleet forgets the window, so A's old failures do not close it again.
  const std::uint64_t openings = gate_b->openings();
  for (int i = 0; i < 4; ++i) gate_b->record(coretry::attempt_status::success, steady_now());
  REQUIRE(gate_b->is_open());
  CHECK(gate_b->openings() == openings + 1);
  const auto n = b.exchanges();
  REQUIRE(eventually([&] { return b.exchanges() >= n + 4 && a.exchanges() >= 2; }));
  CHECK(gate_b->is_open());
  CHECK(gate_b->processes() == 2);
  // The window in Redis holds none of A's failures any more.
  const auto fields = server->command({"HKEYS", b.key_prefix("pricing") + "state"});
  REQUIRE(fields);
  REQUIRE(fields->type == '*');
  for (const auto& field : fields->elements) {
    CAPTURE(field.text);
    CHECK(field.text.find(":failing") == std::string::npos);
  }
}

namespace {

std::size_t open_sockets() {
  std::size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(entry.path(), ec).string().rfind("socket:", 0) == 0) ++n;
  }
  return n;
}

} // namespace

TEST_CASE("redis: destroyed while an exchange waits on a stopped Redis: no hang, nothing left") {
  REDIS_SERVER_OR_SKIP(server);
  io_thread io;
  const std::size_t sockets = open_sockets();
  std::shared_ptr<leased_budget> budget;
  std::shared_ptr<local_gate> gate;
  SUBCASE("an exchange in flight") {
    auto s = std::make_unique<shared_state>(io.executor(), fleet_options(server->port(), "leaver"));
    budget = s->budget("pricing", pricing_budget());
    gate = s->gate("pricing", local_gate::options{});
    s->start();
    REQUIRE(eventually([&] { return s->up(); }));
    server->pause();
    std::this_thread::sleep_for(std::chrono::milliseconds(20)); // the next exchange is sent and waits
    const auto t0 = std::chrono::steady_clock::now();
    s.reset();
    CHECK(since_ms(t0) < 100.0);
  }
  SUBCASE("connecting to a stopped Redis") {
    server->pause();
    auto o = fleet_options(server->port(), "leaver");
    o.connect_timeout = std::chrono::seconds(30);
    auto s = std::make_unique<shared_state>(io.executor(), o);
    budget = s->budget("pricing", pricing_budget());
    s->start();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    s->stop();
    s->stop();
    s.reset();
  }
  SUBCASE("stopped, never started") {
    auto s = std::make_unique<shared_state>(io.executor(), fleet_options(server->port(), "leaver"));
    budget = s->budget("pricing", pricing_budget());
    s->stop();
    CHECK_FALSE(budget->shared()); // local at once: no reconciler will ever make it so
    s.reset();
  }
  // The reconciler ends at once (not after the 30 s connect timeout): it
  // lets go of the budget and closes its socket.
  REQUIRE(eventually([&] { return budget.use_count() == 1; }, std::chrono::seconds(2)));
  CHECK(eventually([&] { return open_sockets() == sockets; }, std::chrono::seconds(2)));
  CHECK_FALSE(budget->shared());
  if (gate) CHECK(gate->processes() == 1);
  server->resume();
}

TEST_CASE("redis: destroyed after its io_context stopped, and stopped before it ran") {
  REDIS_SERVER_OR_SKIP(server);
  std::shared_ptr<leased_budget> budget;
  std::optional<io_thread> io;
  std::unique_ptr<shared_state> s;
  // Up, on an io_context thread of its own that the subcase then stops.
  const auto start_up = [&] {
    io.emplace();
    s = std::make_unique<shared_state>(io->executor(), fleet_options(server->port(), "late"));
    budget = s->budget("pricing", pricing_budget());
    s->start();
    REQUIRE(eventually([&] { return s->up(); }));
  };
  SUBCASE("io_context stopped with the reconciler suspended") {
    start_up();
    io->stop();
    s.reset(); // posts its stop to a stopped io_context
    io.reset(); // destroys what is queued, the reconciler's frame included
  }
  SUBCASE("io_context stopped while paused mid-exchange") {
    start_up();
    server->pause();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    io->stop();
    s.reset(); // its stop stays queued with the reconciler's frame
    io.reset(); // both destroyed with the io_context (which must outlive the shared_state, as for any Asio object)
    server->resume();
  }
  SUBCASE("started on an io_context that never ran") {
    boost::asio::io_context never;
    s = std::make_unique<shared_state>(never.get_executor(), fleet_options(server->port(), "late"));
    budget = s->budget("pricing", pricing_budget());
    s->start();
    s.reset();
    never.run_for(std::chrono::seconds(2)); // the stop arrives with the start: it ends at once
    CHECK(never.stopped());
  }
  CHECK(budget.use_count() == 1);
}

TEST_CASE("redis: every key is under PREFIX:{DEPENDENCY}: and expires") {
  REDIS_SERVER_OR_SKIP(server);
  io_thread io;
  auto o = fleet_options(server->port(), "keyed");
  o.prefix = "shop.v2:retry";
  shared_state s(io.executor(), o);
  CHECK(s.key_prefix("pricing") == "shop.v2:retry:{pricing}:");
  auto budget = s.budget("pricing", pricing_budget());
  auto gate = s.gate("pricing", local_gate::options{});
  auto only_gate = s.gate("stock", local_gate::options{});
  s.start();
  for (int i = 0; i < 10; ++i) {
    gate->record(coretry::attempt_status::success, steady_now());
    only_gate->record(coretry::attempt_status::transient, steady_now());
  }
  REQUIRE(eventually([&] { return s.exchanges() >= 3; }));
  const auto keys = server->command({"KEYS", "*"});
  REQUIRE(keys);
  REQUIRE(keys->type == '*');
  bool budget_key = false, window = false, stock_budget = false;
  for (const auto& key : keys->elements) {
    CAPTURE(key.text);
    const bool pricing = key.text.rfind("shop.v2:retry:{pricing}:", 0) == 0;
    const bool stock = key.text.rfind("shop.v2:retry:{stock}:", 0) == 0;
    CHECK((pricing || stock));
    const auto ttl = server->command({"PTTL", key.text});
    REQUIRE(ttl);
    CHECK(ttl->integer > 0);
    CHECK(ttl->integer <= 10 * 60 * 1000);
    if (key.text == "shop.v2:retry:{pricing}:state") {
      const auto units = server->command({"HEXISTS", key.text, "units"});
      budget_key = units && units->integer == 1;
      const auto fields = server->command({"HKEYS", key.text});
      if (fields)
        for (const auto& field : fields->elements) window = window || field.text.rfind("r", 0) == 0;
    }
    if (key.text == "shop.v2:retry:{stock}:state") {
      const auto units = server->command({"HEXISTS", key.text, "units"});
      stock_budget = units && units->integer == 1;
    }
  }
  CHECK(budget_key);
  CHECK(window);
  CHECK_FALSE(stock_budget); // a dependency with a gate only has no bucket
  CHECK(keys->elements.size() == 4); // per dependency: its state and its processes
}

TEST_CASE("redis: the database of the URL is SELECTed") {
  REDIS_SERVER_OR_SKIP(server);
  io_thread io;
  auto o = fleet_options(server->port(), "selective");
  o.server = coretry::redis::parse_url("redis://127.0.0.1:" + std::to_string(server->port()) + "/3");
  shared_state s(io.executor(), o);
  auto budget = s.budget("pricing", pricing_budget());
  s.start();
  REQUIRE(eventually([&] { return s.exchanges() >= 1; }));
  const auto in_0 = server->command({"DBSIZE"});
  const auto in_3 = send_commands(server->port(), {{"SELECT", "3"}, {"DBSIZE"}});
  REQUIRE(in_0);
  REQUIRE(in_3);
  CHECK(in_0->integer == 0);
  CHECK(in_3->integer == 1); // the budget (no gate: no processes)

  SUBCASE("a database the server does not have is a refusal, told once") {
    problems told;
    auto bad = fleet_options(server->port(), "selective");
    bad.server.db = 100000;
    bad.on_problem = told.callback();
    shared_state t(io.executor(), bad);
    auto local = t.budget("pricing", pricing_budget());
    t.start();
    REQUIRE(eventually([&] { return !local->shared(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    REQUIRE(told.size() == 1);
    CHECK(told.all().front().find("SELECT 100000") != std::string::npos);
  }
}

TEST_CASE("redis: a process with only a budget does not count in the gates' fleet") {
  REDIS_SERVER_OR_SKIP(server);
  io_thread io;
  shared_state gated(io.executor(), fleet_options(server->port(), "gated"));
  shared_state budget_only(io.executor(), fleet_options(server->port(), "budget-only"));
  shared_state other_gated(io.executor(), fleet_options(server->port(), "other-gated"));
  auto gate = gated.gate("pricing", local_gate::options{});
  auto budget = budget_only.budget("pricing", pricing_budget());
  gated.start();
  budget_only.start();
  REQUIRE(eventually([&] { return gated.exchanges() >= 3 && budget_only.exchanges() >= 3; }));
  CHECK(gate->processes() == 1); // it alone probes: its slots are not spaced for two
  auto other = other_gated.gate("pricing", local_gate::options{});
  other_gated.start();
  REQUIRE(eventually([&] { return gate->processes() == 2 && other->processes() == 2; }));
}

TEST_CASE("redis: stop() makes every budget and gate local at once, even with the io_context stopped") {
  REDIS_SERVER_OR_SKIP(server);
  io_thread io;
  shared_state s(io.executor(), fleet_options(server->port(), "stopping"));
  auto budget = s.budget("pricing", pricing_budget());
  auto gate = s.gate("pricing", local_gate::options{});
  s.start();
  REQUIRE(eventually([&] { return s.up() && budget->leased() == 5; }));
  io.stop(); // nothing will run on it again
  s.stop();
  CHECK_FALSE(s.up());
  CHECK_FALSE(budget->shared());
  CHECK(gate->processes() == 1);
  CHECK(budget->try_acquire_retry()); // from its own bucket
}

