// The gate's probe tickets (retry_gate::probe_ended, "called once per such
// admission") on every way an operation can end, with hedging off and on:
// a retry or a hedge that carries a probe, the io_context destroyed
// mid-flight, a factory or a classifier that throws. On virtual time.

#include "test_support.hpp"

#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <memory>
#include <optional>
#include <set>
#include <stdexcept>

using namespace coretry_tests;
using coretry::stop_reason;

namespace {

const boost::system::error_code probe_case_reset = asio::error::connection_reset; // transient

/// Admits every retry and hedge as a probe; counts what it admitted and
/// what it was told is over.
struct ticket_gate final : coretry::retry_gate {
  std::uint64_t next = 1;
  std::set<std::uint64_t> open;
  int admitted = 0;
  int unknown = 0; ///< ended twice, or never admitted
  void record(coretry::attempt_status, coretry::duration) noexcept override {}
  coretry::gate_decision ask(coretry::duration, coretry::duration, const coretry::gate_decision*) noexcept override {
    ++admitted;
    open.insert(next);
    return coretry::gate_decision::admit_probe(next++);
  }
  void probe_ended(std::uint64_t ticket) noexcept override {
    if (open.erase(ticket) == 0) ++unknown;
  }
};

coretry::policy ticket_policy(unsigned hedges, coretry::duration delay) {
  coretry::policy p; // 3 attempts, 250 ms each, 1,000 ms in all
  p.hedging.max_hedges = hedges;
  p.hedging.delay = delay;
  return p;
}

/// Classifies like status_classifier, but throws on the value 999.
struct ticket_classifier {
  coretry::verdict operator()(const boost::system::error_code& ec, int status) const {
    if (!ec && status == 999) throw std::logic_error("classifier");
    return status_classifier{}(ec, status);
  }
};

/// Options for an operation safe to repeat, told to `gate`, its backoff
/// drawn at half the window.
coretry::retry_options ticket_options(ticket_gate& gate, coretry::testing::scripted_random& draws) {
  coretry::retry_options o = idempotent();
  o.gate = &gate;
  o.random = &draws;
  return o;
}

/// Starts one operation on `io`, runs virtual time for `run_for`, then
/// destroys the io_context with the operation still in flight.
void ticket_destroyed_mid_flight(const coretry::policy& p, fake_dependency& dependency, ticket_gate& gate,
                                 coretry::duration run_for) {
  int handler_calls = 0;
  {
    asio::io_context io;
    coretry::testing::manual_runner runner(io);
    coretry::testing::scripted_random draws{0.5, 0.5, 0.5};
    coretry::async_retry<manual_timer>(io.get_executor(), p, ticket_options(gate, draws), dependency.factory(), status_classifier{},
                                       [&](std::exception_ptr, coretry::outcome<int>) { ++handler_calls; });
    runner.run_for(run_for);
  }
  CHECK(handler_calls == 0);
}

struct ticket_run {
  std::exception_ptr exception;
  coretry::duration at{};
};

/// Runs one operation to its end and says when its handler ran.
template <class Factory, class Classifier>
ticket_run ticket_run_to_end(const coretry::policy& p, Factory factory, Classifier classify, ticket_gate& gate) {
  asio::io_context io;
  coretry::testing::manual_runner runner(io);
  coretry::testing::scripted_random draws{0.5, 0.5, 0.5};
  std::optional<ticket_run> ended;
  coretry::async_retry<manual_timer>(io.get_executor(), p, ticket_options(gate, draws), std::move(factory), classify,
                                     [&](std::exception_ptr e, coretry::outcome<int>) {
                                       REQUIRE_FALSE(ended);
                                       ended = ticket_run{e, runner.elapsed()};
                                     });
  runner.run();
  REQUIRE(ended);
  return *ended;
}

} // namespace

TEST_CASE("probe tickets: the io_context destroyed while a retry carrying a probe runs") {
  ticket_gate gate;
  // The first attempt fails at 10 ms; the retry (a probe) hangs.
  fake_dependency dependency{{{10ms, probe_case_reset}, {10s}}};
  SUBCASE("hedging off") { ticket_destroyed_mid_flight(ticket_policy(0, 50ms), dependency, gate, 120ms); }
  SUBCASE("hedging on, no hedge sent") { ticket_destroyed_mid_flight(ticket_policy(1, 900ms), dependency, gate, 120ms); }
  REQUIRE(dependency.calls == 2);
  CHECK(gate.admitted == 1);
  CHECK(gate.open.empty());
  CHECK(gate.unknown == 0);
}

TEST_CASE("probe tickets: the io_context destroyed while a hedge carrying a probe runs") {
  ticket_gate gate;
  fake_dependency dependency{{{10s}}}; // every attempt hangs
  ticket_destroyed_mid_flight(ticket_policy(2, 50ms), dependency, gate, 120ms);
  REQUIRE(dependency.calls == 3); // the first, and hedges at 50 and 100 ms
  CHECK(gate.admitted == 2);
  CHECK(gate.open.empty());
  CHECK(gate.unknown == 0);
}

TEST_CASE("probe tickets: a hedge's factory that throws gives its probe back and ends the operation at once") {
  ticket_gate gate;
  fake_dependency dependency{{{10s}}};
  auto factory = [&dependency](context c) {
    if (c.number == 2) throw std::logic_error("factory");
    return dependency.call();
  };
  const ticket_run end = ticket_run_to_end(ticket_policy(1, 50ms), factory, status_classifier{}, gate);
  CHECK(end.exception);
  CHECK(end.at == 50ms); // the first attempt is wound down, not waited out
  CHECK(gate.admitted == 1);
  CHECK(gate.open.empty());
  CHECK(gate.unknown == 0);
}

TEST_CASE("probe tickets: a classifier that throws on a hedge's result gives its probe back and winds the rest down") {
  ticket_gate gate;
  // The first attempt would run to its limit (250 ms); the hedge, sent at
  // 50 ms, answers 999 at 60 ms, which the classifier throws on.
  fake_dependency dependency{{{10s}, {10ms, {}, 999}}};
  const ticket_run end = ticket_run_to_end(ticket_policy(1, 50ms), dependency.factory(), ticket_classifier{}, gate);
  CHECK(end.exception);
  CHECK(end.at == 60ms);
  CHECK(dependency.cancelled_at == std::vector<coretry::duration>{60ms});
  CHECK(gate.admitted == 1);
  CHECK(gate.open.empty());
  CHECK(gate.unknown == 0);
}

TEST_CASE("probe tickets: a classifier that throws on the last attempt in flight gives its probe back") {
  ticket_gate gate;
  fake_dependency dependency{{{10ms, probe_case_reset}, {10ms, {}, 999}}};
  SUBCASE("hedging off") {
    const ticket_run end = ticket_run_to_end(ticket_policy(0, 50ms), dependency.factory(), ticket_classifier{}, gate);
    CHECK(end.exception);
  }
  SUBCASE("hedging on") {
    const ticket_run end = ticket_run_to_end(ticket_policy(1, 900ms), dependency.factory(), ticket_classifier{}, gate);
    CHECK(end.exception);
  }
  CHECK(gate.admitted == 1);
  CHECK(gate.open.empty());
  CHECK(gate.unknown == 0);
}
