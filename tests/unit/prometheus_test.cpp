// The Prometheus observer's exposition text: exact lines for a known
// sequence of events, bounded labels, and a parse of every sample line.

#include "prometheus_text.hpp"

#include <coretry/prometheus.hpp>

#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <doctest/doctest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using coretry::attempt_record;
using coretry::prometheus_observer;
using coretry::stop_reason;
using coretry::verdict;
using namespace coretry_tests::prometheus_text;

namespace {


} // namespace

TEST_SUITE("prometheus observer") {

TEST_CASE("counters, histogram, stops and budget render as Prometheus text") {
  prometheus_observer o{{"/books/{id}"}};
  coretry::token_bucket_budget budget;
  o.watch_budget("pricing", budget);

  const auto fail = verdict::transient("http_503");
  run_operation(o, "/books/{id}", {verdict::success()}, stop_reason::succeeded);
  run_operation(o, "/books/{id}", {fail, verdict::success()}, stop_reason::succeeded, 250ms);
  run_operation(o, "/books/{id}", {fail, fail, fail}, stop_reason::attempts_exhausted);
  run_operation(o, "/books/{id}", {verdict::transient("timeout")}, stop_reason::cancelled);
  run_operation(o, "/unknown/route?id=42", {verdict::success()}, stop_reason::succeeded);
  budget.try_acquire_retry();
  budget.try_acquire_retry();

  const std::string text = o.text();
  const auto s = parse_samples(text);
  const std::string r = R"(route="/books/{id}")";
  CHECK(s.at("coretry_operations_total{" + r + "}") == 4);
  CHECK(s.at("coretry_attempts_total{" + r + "}") == 7);
  CHECK(s.at("coretry_initial_successes_total{" + r + "}") == 1);
  CHECK(s.at("coretry_successes_total{" + r + "}") == 2);
  CHECK(s.at("coretry_attempt_failures_total{" + r + R"(,category="http_503"})") == 4);
  CHECK(s.at("coretry_attempt_failures_total{" + r + R"(,category="timeout"})") == 1);
  CHECK(s.at("coretry_attempts_per_operation_bucket{" + r + R"(,le="1"})") == 2);
  CHECK(s.at("coretry_attempts_per_operation_bucket{" + r + R"(,le="2"})") == 3);
  CHECK(s.at("coretry_attempts_per_operation_bucket{" + r + R"(,le="3"})") == 4);
  CHECK(s.at("coretry_attempts_per_operation_bucket{" + r + R"(,le="+Inf"})") == 4);
  CHECK(s.at("coretry_attempts_per_operation_sum{" + r + "}") == 7);
  CHECK(s.at("coretry_attempts_per_operation_count{" + r + "}") == 4);
  CHECK(s.at("coretry_backoffs_total{" + r + "}") == 3);
  CHECK(s.at("coretry_backoff_seconds_total{" + r + "}") == doctest::Approx(0.27));
  CHECK(s.at("coretry_cancellations_total{" + r + "}") == 1);
  CHECK(s.at("coretry_stops_total{" + r + R"(,reason="succeeded"})") == 2);
  CHECK(s.at("coretry_stops_total{" + r + R"(,reason="attempts_exhausted"})") == 1);
  CHECK(s.at("coretry_stops_total{" + r + R"(,reason="cancelled"})") == 1);
  CHECK(s.at("coretry_stops_total{" + r + R"(,reason="budget_exhausted"})") == 0);
  CHECK(s.at("coretry_stops_total{" + r + R"(,reason="dependency_unhealthy"})") == 0);
  CHECK(s.at(R"(coretry_budget_tokens{dependency="pricing"})") == 18);
  CHECK(s.at(R"(coretry_budget_capacity{dependency="pricing"})") == 20);
  // An unknown operation name never becomes a label value of its own.
  CHECK(s.at(R"(coretry_operations_total{route="other"})") == 1);
  CHECK(text.find("/unknown/route") == std::string::npos);
  CHECK(text.find("# TYPE coretry_attempts_per_operation histogram\n") != std::string::npos);
  CHECK(text.find("# TYPE coretry_budget_tokens gauge\n") != std::string::npos);
  CHECK(text.find("coretry_successes_total{route=\"/books/{id}\"} 2\n") != std::string::npos);
}

TEST_CASE("a watched retry gate renders as open and level gauges") {
  prometheus_observer o{{"r"}};
  coretry::local_gate gate({.min_requests = 10, .step_successes = 1});
  o.watch_gate("pricing", gate);
  auto s = parse_samples(o.text());
  CHECK(s.at(R"(coretry_gate_open{dependency="pricing"})") == 1);
  CHECK(s.at(R"(coretry_gate_level{dependency="pricing"})") == 0);
  for (int i = 0; i < 10; ++i) gate.record(coretry::attempt_status::transient, 0ms);
  gate.record(coretry::attempt_status::success, 1ms); // a step up of the slow start
  const std::string text = o.text();
  s = parse_samples(text);
  CHECK(s.at(R"(coretry_gate_open{dependency="pricing"})") == 0);
  CHECK(s.at(R"(coretry_gate_level{dependency="pricing"})") == 1);
  CHECK(text.find("# TYPE coretry_gate_open gauge\n") != std::string::npos);
  CHECK(s.at(R"(coretry_gate_answers_total{dependency="pricing",answer="admitted"})") == 0);
  // Recovering at level 1: the first retry is a probe admitted at once, the
  // next is told to wait for its slot; an open gate admits without a probe.
  CHECK(gate.ask(2ms, 10s, nullptr).what == coretry::gate_decision::action::admit);
  CHECK(gate.ask(2ms, 10s, nullptr).what == coretry::gate_decision::action::wait);
  CHECK(gate.ask(2ms, 2ms, nullptr).what == coretry::gate_decision::action::deny);
  s = parse_samples(o.text());
  CHECK(s.at(R"(coretry_gate_answers_total{dependency="pricing",answer="admitted"})") == 1);
  CHECK(s.at(R"(coretry_gate_answers_total{dependency="pricing",answer="probe"})") == 1);
  CHECK(s.at(R"(coretry_gate_answers_total{dependency="pricing",answer="held"})") == 1);
  CHECK(s.at(R"(coretry_gate_answers_total{dependency="pricing",answer="denied"})") == 1);
  coretry::local_gate healthy;
  CHECK(healthy.ask(0ms, 10s, nullptr).what == coretry::gate_decision::action::admit);
  CHECK(healthy.counts().admitted == 1);
  CHECK(healthy.counts().probes == 0);
}

TEST_CASE("failure categories are bounded per route") {
  prometheus_observer o{{"r"}};
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (int i = 0; i < 40; ++i) v.push_back("category_" + std::to_string(i));
    return v;
  }();
  for (const auto& name : names) run_operation(o, "r", {verdict::transient(name)}, stop_reason::attempts_exhausted);
  const auto s = parse_samples(o.text());
  std::set<std::string> categories;
  for (const auto& [key, value] : s)
    if (key.starts_with("coretry_attempt_failures_total{route=\"r\"")) categories.insert(key);
  CHECK(categories.size() == prometheus_observer::max_categories_per_route + 1);
  CHECK(s.at(R"(coretry_attempt_failures_total{route="r",category="other"})") ==
        40 - prometheus_observer::max_categories_per_route);
}

TEST_CASE("label values are escaped and bad construction is refused") {
  prometheus_observer o{{"/say \"hi\"\n\\"}};
  run_operation(o, "/say \"hi\"\n\\", {verdict::success()}, stop_reason::succeeded);
  const std::string text = o.text();
  CHECK(text.find(R"(coretry_operations_total{route="/say \"hi\"\n\\"} 1)") != std::string::npos);
  CHECK(parse_samples(text).size() > 0);
  CHECK_THROWS_AS(prometheus_observer({"a", "a"}), std::invalid_argument);
  CHECK_THROWS_AS(prometheus_observer({""}), std::invalid_argument);
  CHECK_THROWS_AS(prometheus_observer({"other"}), std::invalid_argument);
  CHECK_THROWS_AS(prometheus_observer({"a"}, "1bad"), std::invalid_argument);
  CHECK_THROWS_AS(prometheus_observer({"a"}, ""), std::invalid_argument);
  CHECK_THROWS_AS(prometheus_observer({"a"}, "bad prefix"), std::invalid_argument);
}

TEST_CASE("the observer is a prometheus-cpp Collectable beside a registry of the program's own") {
  auto observer = std::make_shared<prometheus_observer>(std::vector<std::string>{"/books/{id}"});
  coretry::token_bucket_budget budget;
  observer->watch_budget("pricing", budget);
  run_operation(*observer, "/books/{id}", {verdict::transient("http_503"), verdict::success()}, stop_reason::succeeded);

  // What prometheus::Exposer does with every registered Collectable.
  auto registry = std::make_shared<::prometheus::Registry>();
  auto& jobs = ::prometheus::BuildCounter().Name("jobs_total").Help("Jobs done.").Register(*registry);
  jobs.Add({{"kind", "a"}}).Increment(3);
  const std::vector<std::weak_ptr<::prometheus::Collectable>> collectables{observer, registry};
  std::vector<::prometheus::MetricFamily> families;
  for (const auto& weak : collectables)
    if (auto c = weak.lock()) {
      auto more = c->Collect();
      families.insert(families.end(), more.begin(), more.end());
    }

  const auto family = [&](std::string_view name) -> const ::prometheus::MetricFamily& {
    for (const auto& f : families)
      if (f.name == name) return f;
    FAIL("no family ", name);
    throw 0;
  };
  CHECK(family("coretry_operations_total").type == ::prometheus::MetricType::Counter);
  CHECK(family("coretry_budget_tokens").type == ::prometheus::MetricType::Gauge);
  const auto& per_operation = family("coretry_attempts_per_operation");
  REQUIRE(per_operation.type == ::prometheus::MetricType::Histogram);
  REQUIRE(per_operation.metric.size() == 2); // the route and "other"
  const auto& h = per_operation.metric[0].histogram;
  CHECK(per_operation.metric[0].label.at(0).value == "/books/{id}");
  CHECK(h.sample_count == 1);
  CHECK(h.sample_sum == 2);
  REQUIRE(h.bucket.size() == 9);
  CHECK(h.bucket[0].upper_bound == 1);
  CHECK(h.bucket[0].cumulative_count == 0);
  CHECK(h.bucket[1].cumulative_count == 1);

  const std::string text = ::prometheus::TextSerializer{}.Serialize(families);
  const auto s = parse_samples(text);
  CHECK(s.at(R"(coretry_attempts_total{route="/books/{id}"})") == 2);
  CHECK(s.at(R"(coretry_attempt_failures_total{route="/books/{id}",category="http_503"})") == 1);
  CHECK(s.at(R"(coretry_attempts_per_operation_bucket{route="/books/{id}",le="+Inf"})") == 1);
  CHECK(s.at(R"(jobs_total{kind="a"})") == 3);
  CHECK(text.find("# TYPE coretry_attempts_per_operation histogram\n") != std::string::npos);
  // The observer's own text is the same serializer's output of its families.
  CHECK(observer->text() == ::prometheus::TextSerializer{}.Serialize(observer->Collect()));
}

TEST_CASE("attempt durations by result, and the attempt limit, render as a histogram and a gauge") {
  prometheus_observer o({"/prices/{id}"});
  const auto attempt = [&](unsigned n, coretry::duration took, verdict v, bool timed_out = false) {
    o.attempt_started({"/prices/{id}", n, 0ms, 950ms, n == 1 ? coretry::duration::max() : 30ms});
    attempt_record record;
    record.number = n;
    record.start = 100ms;
    record.end = 100ms + took;
    record.classified = v;
    if (timed_out) record.error = coretry::attempt_error::timed_out;
    o.attempt_finished({"/prices/{id}", record});
  };
  auto samples = parse_samples(o.text());
  CHECK(samples.count(R"(coretry_attempt_limit_seconds{route="/prices/{id}"})") == 0); // no attempt yet
  attempt(1, 1ms, verdict::success());      // le 0.001: a bound is inclusive
  attempt(1, 1500us, verdict::success());   // le 0.002
  attempt(1, 300ms, verdict::success());    // le 0.5
  attempt(1, 12s, verdict::success());      // +Inf only
  samples = parse_samples(o.text());
  // The first attempts had no bound: the gauge shows their allowance.
  CHECK(samples.at(R"(coretry_attempt_limit_seconds{route="/prices/{id}"})") == 0.95);
  attempt(2, 30ms, verdict::transient("timeout"), true);
  attempt(2, 4ms, verdict::transient("http_503"));
  samples = parse_samples(o.text());
  const auto bucket = [&](std::string_view result, std::string_view le) {
    return samples.at(R"(coretry_attempt_duration_seconds_bucket{route="/prices/{id}",result=")" +
                      std::string(result) + R"(",le=")" + std::string(le) + "\"}");
  };
  CHECK(bucket("success", "0.001") == 1);
  CHECK(bucket("success", "0.002") == 2);
  CHECK(bucket("success", "0.2") == 2);
  CHECK(bucket("success", "0.5") == 3);
  CHECK(bucket("success", "10") == 3);
  CHECK(bucket("success", "+Inf") == 4);
  CHECK(samples.at(R"(coretry_attempt_duration_seconds_count{route="/prices/{id}",result="success"})") == 4);
  CHECK(samples.at(R"(coretry_attempt_duration_seconds_sum{route="/prices/{id}",result="success"})") ==
        doctest::Approx(12.3025));
  CHECK(bucket("timeout", "0.02") == 0);
  CHECK(bucket("timeout", "0.05") == 1);
  CHECK(bucket("failure", "0.002") == 0);
  CHECK(bucket("failure", "0.005") == 1);
  CHECK(samples.at(R"(coretry_attempt_duration_seconds_count{route="/prices/{id}",result="failure"})") == 1);
  CHECK(samples.at(R"(coretry_attempt_duration_seconds_count{route="other",result="success"})") == 0);
  CHECK(samples.at(R"(coretry_attempt_limit_seconds{route="/prices/{id}"})") == 0.03);
  CHECK(samples.count(R"(coretry_attempt_limit_seconds{route="other"})") == 0);
  const std::string text = o.text();
  CHECK(text.find("# TYPE coretry_attempt_duration_seconds histogram\n") != std::string::npos);
  CHECK(text.find("# TYPE coretry_attempt_limit_seconds gauge\n") != std::string::npos);
}

TEST_CASE("attempt durations: attempts with a connection carry connection=new or reused, the others no label") {
  prometheus_observer o({"/prices/{id}"});
  const auto attempt = [&](coretry::duration took, coretry::connection_use use) {
    attempt_record record;
    record.number = 1;
    record.end = took;
    record.classified = verdict::success();
    record.connection = use;
    o.attempt_finished({"/prices/{id}", record});
  };
  auto samples = parse_samples(o.text());
  // No attempt with a connection yet: only the series without the label.
  CHECK(samples.at(R"(coretry_attempt_duration_seconds_count{route="/prices/{id}",result="success"})") == 0);
  CHECK(samples.count(R"(coretry_attempt_duration_seconds_count{route="/prices/{id}",result="success",connection="new"})") == 0);
  attempt(30ms, coretry::connection_use::fresh);
  attempt(2ms, coretry::connection_use::reused);
  attempt(3ms, coretry::connection_use::reused);
  attempt(1ms, coretry::connection_use::none);
  samples = parse_samples(o.text());
  CHECK(samples.at(R"(coretry_attempt_duration_seconds_count{route="/prices/{id}",result="success",connection="new"})") == 1);
  CHECK(samples.at(R"(coretry_attempt_duration_seconds_bucket{route="/prices/{id}",result="success",connection="new",le="0.02"})") == 0);
  CHECK(samples.at(R"(coretry_attempt_duration_seconds_count{route="/prices/{id}",result="success",connection="reused"})") == 2);
  CHECK(samples.at(R"(coretry_attempt_duration_seconds_bucket{route="/prices/{id}",result="success",connection="reused",le="0.005"})") == 2);
  CHECK(samples.at(R"(coretry_attempt_duration_seconds_count{route="/prices/{id}",result="success"})") == 1);
  CHECK(samples.count(R"(coretry_attempt_duration_seconds_count{route="/prices/{id}",result="timeout",connection="new"})") == 0);
  CHECK(coretry::to_string(coretry::connection_use::fresh) == "new");
  CHECK(coretry::to_string(coretry::connection_use::reused) == "reused");
  CHECK(coretry::to_string(coretry::connection_use::none) == "none");
}

} // TEST_SUITE
