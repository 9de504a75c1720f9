// coretry-load's command line: every value bounded, every refusal one line
// naming the option and the problem.

#include "load/load_options.hpp"

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

using namespace std::chrono_literals;

namespace {

coretry::load::arguments load_args(std::vector<std::string> phases = {"320:2"}) {
  coretry::load::arguments args;
  args.url = "http://127.0.0.1:8080/books/1?x=y";
  args.phases = std::move(phases);
  return args;
}

std::string load_refusal(const coretry::load::arguments& args) {
  try {
    (void)coretry::load::make_plan(args, 1);
  } catch (const coretry::load::usage_error& error) {
    return error.what();
  }
  return "(accepted)";
}

} // namespace

TEST_CASE("options: a good command line becomes the plan") {
  auto args = load_args({"1280:15", "160.5:0.5"});
  args.seed = "42";
  args.connections = "512";
  args.timeout = "250";
  args.window = "500";
  args.deadline_header = true;
  const auto plan = coretry::load::make_plan(args, 7);
  CHECK(plan.host == "127.0.0.1");
  CHECK(plan.port == 8080);
  CHECK(plan.target == "/books/1?x=y");
  CHECK(plan.host_field == "127.0.0.1:8080");
  REQUIRE(plan.phases.size() == 2);
  CHECK(plan.phases[0].rate == 1280);
  CHECK(plan.phases[0].length == 15s);
  CHECK(plan.phases[1].rate == 160.5);
  CHECK(plan.phases[1].length == 500ms);
  CHECK(plan.seed == 42);
  CHECK(plan.connections == 512);
  CHECK(plan.timeout == 250ms);
  CHECK(plan.window == 500ms);
  CHECK(plan.deadline_header);

  // Defaults; --rate and --duration are one phase; the seed comes from outside.
  coretry::load::arguments single;
  single.url = "http://localhost";
  single.rate = "10";
  single.duration = "1";
  const auto defaults = coretry::load::make_plan(single, 7);
  CHECK(defaults.port == 80);
  CHECK(defaults.target == "/");
  CHECK(defaults.seed == 7);
  CHECK(defaults.connections == 256);
  CHECK(defaults.timeout == 1000ms);
  CHECK(defaults.window == 1000ms);
  REQUIRE(defaults.phases.size() == 1);
  CHECK(defaults.phases[0].length == 1s);
}

TEST_CASE("options: every value is bounded, and a refusal names the option") {
  struct bad {
    const char* what;
    coretry::load::arguments args;
    const char* named;
  };
  std::vector<bad> cases;
  const auto with = [&](const char* what, auto change, const char* named) {
    auto args = load_args();
    change(args);
    cases.push_back({what, std::move(args), named});
  };
  using args_t = coretry::load::arguments;
  with("no phase", [](args_t& a) { a.phases.clear(); }, "--phase");
  with("phase without seconds", [](args_t& a) { a.phases = {"320"}; }, "--phase");
  with("rate too high", [](args_t& a) { a.phases = {"100001:1"}; }, "--phase: 100001 is outside");
  with("negative rate", [](args_t& a) { a.phases = {"-5:1"}; }, "--phase");
  with("rate not a number", [](args_t& a) { a.phases = {"4x:15"}; }, "--phase");
  with("zero seconds", [](args_t& a) { a.phases = {"10:0"}; }, "--phase: 0 is outside");
  with("phase too long", [](args_t& a) { a.phases = {"10:3601"}; }, "--phase: 3601 is outside");
  with("too many phases", [](args_t& a) { a.phases.assign(101, "1:1"); }, "at most 100 phases");
  with("all phases too long", [](args_t& a) { a.phases.assign(25, "1:3600"); }, "longer than 86400 s");
  with("rate and phase", [](args_t& a) { a.rate = "1", a.duration = "1"; }, "--phase: not with --rate");
  with("rate without duration", [](args_t& a) { a.phases.clear(), a.rate = "1"; }, "--rate: needs --duration");
  with("connections zero", [](args_t& a) { a.connections = "0"; }, "--connections: 0 is outside 1 to 10000");
  with("connections too many", [](args_t& a) { a.connections = "10001"; }, "--connections: 10001 is outside");
  with("timeout zero", [](args_t& a) { a.timeout = "0"; }, "--timeout: 0 is outside 1 to 600000");
  with("timeout too long", [](args_t& a) { a.timeout = "600001"; }, "--timeout");
  with("timeout not whole", [](args_t& a) { a.timeout = "2.5"; }, "--timeout");
  with("window too short", [](args_t& a) { a.window = "5"; }, "--window: 5 is outside 10 to 60000");
  with("window too long", [](args_t& a) { a.window = "60001"; }, "--window");
  with("seed not a number", [](args_t& a) { a.seed = "lucky"; }, "--seed");
  with("seed too large", [](args_t& a) { a.seed = "18446744073709551616"; }, "--seed");
  with("https", [](args_t& a) { a.url = "https://127.0.0.1/"; }, "https is not supported");
  with("other scheme", [](args_t& a) { a.url = "ftp://127.0.0.1/"; }, "scheme must be http");
  with("no host", [](args_t& a) { a.url = "http:///books/1"; }, "no host");
  with("bad port", [](args_t& a) { a.url = "http://127.0.0.1:70000/"; }, "port");
  with("not a URL", [](args_t& a) { a.url = "not a url"; }, "URL");
  with("no URL", [](args_t& a) { a.url.clear(); }, "URL: missing");
  with("URL too long", [](args_t& a) { a.url = "http://127.0.0.1/" + std::string(2040, 'a'); }, "longer than 2048");
  for (const bad& each : cases) {
    CAPTURE(each.what);
    const std::string message = load_refusal(each.args);
    CHECK(message.find(each.named) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
  // The bounds themselves are accepted.
  auto edges = load_args({"100000:0.001", "0:3600"});
  edges.connections = "10000";
  edges.timeout = "600000";
  edges.window = "10";
  CHECK(load_refusal(edges) == "(accepted)");
}
