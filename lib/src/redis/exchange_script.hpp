// The one server-side script of an exchange (see shared_state.hpp), run
// atomically by Redis. Instants are Redis's own (TIME), so the fleet's
// clocks need not agree.
//
// KEYS[1] the budget (a hash: units = millionths of a token)
// KEYS[2] the live processes with a gate (a sorted set: process -> last
//         exchange, ms); a process with only a budget is not one of them
// ARGV: 1 capacity (units), 2 deposit (units), 3 tokens wanted, 4 process,
//       5 gate bucket width (ms, 0: no gate), 6 gate buckets, 7 requests and
//       8 accepts to add, 9 forget the window (1 after this gate opened),
//       10 a process is gone after this long (ms), 11 lifetime of the
//       budget's and processes' keys (ms), 12 use the budget (0/1),
//       13 the window's key prefix (bucket keys are it plus the epoch; same
//       hash tag as KEYS)
// Returns {tokens granted, live processes with a gate (0 without one), other
// processes' requests and accepts in the window, tokens left (units)}.
#ifndef CORETRY_REDIS_EXCHANGE_SCRIPT_HPP
#define CORETRY_REDIS_EXCHANGE_SCRIPT_HPP

namespace coretry::redis::detail {

inline constexpr const char* exchange_script = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[11])
local grant, left = 0, 0
if ARGV[12] == '1' then
  local cap = tonumber(ARGV[1])
  local units = tonumber(redis.call('HGET', KEYS[1], 'units')) or cap
  units = math.min(cap, math.max(0, units) + tonumber(ARGV[2]))
  grant = math.max(0, math.min(tonumber(ARGV[3]), math.floor(units / 1000000)))
  units = units - grant * 1000000
  redis.call('HSET', KEYS[1], 'units', units)
  redis.call('PEXPIRE', KEYS[1], ttl)
  left = units
end
local live, pr, pa = 0, 0, 0
local width = tonumber(ARGV[5])
if width > 0 then
  redis.call('ZADD', KEYS[2], now, ARGV[4])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[10]))
  redis.call('PEXPIRE', KEYS[2], ttl)
  live = redis.call('ZCARD', KEYS[2])
  local n = tonumber(ARGV[6])
  local epoch = math.floor(now / width)
  local base = ARGV[13]
  if ARGV[9] == '1' then
    for i = 0, n do redis.call('DEL', base .. (epoch - i)) end
  end
  local dr, da = tonumber(ARGV[7]), tonumber(ARGV[8])
  if dr > 0 then
    local key = base .. epoch
    redis.call('HINCRBY', key, 'r', dr)
    redis.call('HINCRBY', key, 'r:' .. ARGV[4], dr)
    if da > 0 then
      redis.call('HINCRBY', key, 'a', da)
      redis.call('HINCRBY', key, 'a:' .. ARGV[4], da)
    end
    redis.call('PEXPIRE', key, (n + 1) * width)
  end
  for i = 0, n - 1 do
    local v = redis.call('HMGET', base .. (epoch - i), 'r', 'a', 'r:' .. ARGV[4], 'a:' .. ARGV[4])
    pr = pr + (tonumber(v[1]) or 0) - (tonumber(v[3]) or 0)
    pa = pa + (tonumber(v[2]) or 0) - (tonumber(v[4]) or 0)
  end
end
return {grant, live, math.max(0, pr), math.max(0, pa), left}
)lua";

} // namespace coretry::redis::detail

#endif
