#ifndef CORETRY_HTTP_ADDRESSES_HPP
#define CORETRY_HTTP_ADDRESSES_HPP

// A dependency at several addresses: names pinned to addresses (curl's
// --resolve), and the ejection of addresses that keep failing.

#include <coretry/policy.hpp>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace coretry::http {

/// A name pinned to addresses, as curl's `--resolve HOST:PORT:ADDR[,ADDR...]`:
/// connections to HOST on PORT go to these addresses, in this order, and the
/// name is never looked up. TLS is still verified against HOST.
struct resolve_entry {
  std::string host; ///< lower-case, as URLs are read
  std::uint16_t port = 0;
  std::vector<boost::asio::ip::address> addresses;
};

/// Reads `HOST:PORT:ADDR[,ADDR...]`; an IPv6 address is written in brackets
/// (`[::1]`). At most 64 addresses; duplicates are refused. Throws
/// std::invalid_argument naming the problem and quoting the entry.
resolve_entry parse_resolve_entry(std::string_view text);

/// An address and port as URLs write them: "127.0.0.2:8080", "[::1]:8080".
std::string to_string(const boost::asio::ip::tcp::endpoint& at);

/// When an address is taken out of use for a while: after
/// `consecutive_failures` failures in a row at it (a connection refused,
/// reset or unreachable, or outrun by a later address's by the connection
/// attempt delay; an attempt that ran out its time there; a 5xx answer from
/// it that the classifier takes as transient), for
/// `base_ejection_time` times the number of times it has been ejected, at
/// most `max_ejection_time`. Never more than `max_ejection_percent` of a
/// name's addresses at once, but one when the name has two or more (and
/// never all of them). An ejected address is tried only when every other
/// address fails too; it returns by itself when its time is up.
struct outlier_ejection {
  /// Zero: addresses are never ejected.
  unsigned consecutive_failures = 5;
  duration base_ejection_time = std::chrono::seconds(30); ///< positive
  duration max_ejection_time = std::chrono::seconds(300); ///< at least base_ejection_time
  /// 0 to 100.
  unsigned max_ejection_percent = 50;
};

/// The load on one address of a name whose requests are spread
/// (balance_mode::least_cost, two addresses or more).
struct address_load {
  std::string name; ///< "host:port", as requests name it
  boost::asio::ip::tcp::endpoint address;
  std::uint64_t requests = 0; ///< requests sent to it so far (since the name listed it)
  unsigned outstanding = 0;   ///< requests in flight to it now
  /// What the balancer compares: its latency estimate in nanoseconds (peak
  /// EWMA) times the square root of its requests in flight plus one; 0
  /// while idle before its first answer (and after a failure's hold).
  double cost = 0;
  bool ejected = false; ///< ejected now
};

/// Counters of the client's addresses, for tests and metrics.
struct address_stats {
  std::uint64_t ejections = 0;      ///< addresses ejected so far
  std::size_t ejected = 0;          ///< addresses ejected now
  std::uint64_t connect_races = 0;  ///< new connections raced over more than one address
  /// Each spread address's load, names in order, each name's addresses in
  /// its list's order (at most 64 per name, 1,024 names).
  std::vector<address_load> spread;
};

} // namespace coretry::http

#endif
