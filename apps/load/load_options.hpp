#ifndef CORETRY_LOAD_OPTIONS_HPP
#define CORETRY_LOAD_OPTIONS_HPP

// coretry-load's command line, checked: every problem is a usage_error whose
// one-line message names the option and what is wrong with its value. Every
// input is bounded (the limits below).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace coretry::load {

/// A bad command line (the program exits with status 2).
class usage_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

inline constexpr double most_rate = 100000;                      ///< requests per second, per phase
inline constexpr std::chrono::seconds longest_phase{3600};        ///< one phase
inline constexpr std::chrono::seconds longest_run{24 * 3600};     ///< all phases together
inline constexpr std::size_t most_phases = 100;
inline constexpr std::size_t most_connections = 10000;
inline constexpr std::chrono::milliseconds longest_timeout{600000};
inline constexpr std::chrono::milliseconds shortest_window{10};
inline constexpr std::chrono::milliseconds longest_window{60000};
inline constexpr std::size_t longest_url = 2048;

/// Requests arrive at `rate` per second (a Poisson process) for `length`.
struct phase {
  double rate = 0;
  std::chrono::nanoseconds length{};
};

/// The command line as typed (values as text, so that each is checked with
/// its option's name).
struct arguments {
  std::string url;
  std::vector<std::string> phases;      ///< --phase RATE:SECONDS, in order
  std::optional<std::string> rate;      ///< --rate (one phase, with --duration)
  std::optional<std::string> duration;  ///< --duration SECONDS
  std::optional<std::string> seed;
  std::optional<std::string> connections;
  std::optional<std::string> timeout;   ///< milliseconds
  std::optional<std::string> window;    ///< milliseconds
  bool deadline_header = false;
  bool json = false;
};

/// What to run, fully decided.
struct plan {
  std::string host;        ///< as in the URL (an IP address or a name, resolved once at the start)
  std::uint16_t port = 80;
  std::string target = "/"; ///< path and query, as in the URL
  std::string host_field;  ///< the Host header: host[:port]
  std::vector<phase> phases;
  std::uint64_t seed = 0;
  std::size_t connections = 256;
  std::chrono::milliseconds timeout{1000};
  bool deadline_header = false; ///< send x-coretry-deadline-ms with what is left of the timeout
  std::chrono::milliseconds window{1000};
  bool json = false;
};

/// "RATE:SECONDS", e.g. "1280:15" or "160.5:0.5".
phase parse_phase(std::string_view option, std::string_view text);

/// Checks everything; `seed` is used when the arguments give none.
plan make_plan(const arguments& args, std::uint64_t seed);

} // namespace coretry::load

#endif
