// The one server-side script of an exchange (see shared_state.hpp), run
// atomically by Redis. Instants are Redis's own (TIME), so the fleet's
// clocks need not agree. It keeps to a handful of commands per exchange:
// everything of a dependency but its process list is one hash.
//
// KEYS[1] the dependency's state (a hash): `units` (the budget's tokens, in
//         millionths), `pruned` (the window's last pruned epoch), and per
//         window epoch E: `rE`, `aE` (the fleet's requests and accepts) and
//         `rE:P`, `aE:P` (process P's share of them)
// KEYS[2] the live processes with a gate (a sorted set: process -> last
//         exchange, ms); a process with only a budget is not one of them
// ARGV: 1 capacity (units), 2 deposit (units), 3 tokens wanted, 4 process,
//       5 gate bucket width (ms, 0: no gate), 6 gate buckets, 7 requests and
//       8 accepts to add, 9 forget the window (1 after this gate opened),
//       10 a process is gone after this long (ms), 11 lifetime of the keys
//       (ms), 12 use the budget (0/1)
// Returns {tokens granted, live processes with a gate (0 without one), other
// processes' requests and accepts in the window, tokens left (units)}.
#ifndef CORETRY_REDIS_EXCHANGE_SCRIPT_HPP
#define CORETRY_REDIS_EXCHANGE_SCRIPT_HPP

namespace coretry::redis::detail {

inline constexpr const char* exchange_script = R"lua(
-- TIME before a write needs effects replication: the default from Redis 5,
-- asked for here on older servers.
if redis.replicate_commands then redis.replicate_commands() end
local pid = ARGV[4]
local width, n = tonumber(ARGV[5]), tonumber(ARGV[6])
local gate = width > 0
local ttl = tonumber(ARGV[11])
local now, epoch = 0, 0
local fields = {'units', 'pruned'}
if gate then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  epoch = math.floor(now / width)
  for i = 0, n - 1 do
    local e = epoch - i
    fields[#fields + 1] = 'r' .. e
    fields[#fields + 1] = 'a' .. e
    fields[#fields + 1] = 'r' .. e .. ':' .. pid
    fields[#fields + 1] = 'a' .. e .. ':' .. pid
  end
end
local v = redis.call('HMGET', KEYS[1], unpack(fields))
local set = {}
local grant, left = 0, 0
if ARGV[12] == '1' then
  local cap = tonumber(ARGV[1])
  local units = tonumber(v[1]) or cap
  units = math.min(cap, math.max(0, units) + tonumber(ARGV[2]))
  grant = math.max(0, math.min(tonumber(ARGV[3]), math.floor(units / 1000000)))
  units = units - grant * 1000000
  set[#set + 1] = 'units'
  set[#set + 1] = units
  left = units
end
local live, pr, pa = 0, 0, 0
local pruning = false
if gate then
  local forget = ARGV[9] == '1'
  if forget or tonumber(v[2]) ~= epoch then
    -- Once per bucket (or to forget an outage): drop the fields the window
    -- has left behind, and the processes gone quiet.
    local oldest = forget and math.huge or epoch - n + 1
    local dead = {}
    for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
      local e = tonumber(string.match(f, '^[ra](%d+)'))
      if e and e < oldest then dead[#dead + 1] = f end
    end
    for i = 1, #dead, 1000 do
      redis.call('HDEL', KEYS[1], unpack(dead, i, math.min(i + 999, #dead)))
    end
    set[#set + 1] = 'pruned'
    set[#set + 1] = epoch
    pruning = true
    if forget then
      for i = 3, #v do v[i] = false end
    end
  end
  local dr, da = tonumber(ARGV[7]), tonumber(ARGV[8])
  if dr > 0 then
    set[#set + 1] = 'r' .. epoch
    set[#set + 1] = (tonumber(v[3]) or 0) + dr
    set[#set + 1] = 'r' .. epoch .. ':' .. pid
    set[#set + 1] = (tonumber(v[5]) or 0) + dr
    v[3] = (tonumber(v[3]) or 0) + dr
    v[5] = (tonumber(v[5]) or 0) + dr
  end
  if da > 0 then
    set[#set + 1] = 'a' .. epoch
    set[#set + 1] = (tonumber(v[4]) or 0) + da
    set[#set + 1] = 'a' .. epoch .. ':' .. pid
    set[#set + 1] = (tonumber(v[6]) or 0) + da
    v[4] = (tonumber(v[4]) or 0) + da
    v[6] = (tonumber(v[6]) or 0) + da
  end
  for i = 0, n - 1 do
    local b = 3 + 4 * i
    pr = pr + (tonumber(v[b]) or 0) - (tonumber(v[b + 2]) or 0)
    pa = pa + (tonumber(v[b + 1]) or 0) - (tonumber(v[b + 3]) or 0)
  end
  redis.call('ZADD', KEYS[2], now, pid)
  if pruning then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[10]))
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
  live = redis.call('ZCOUNT', KEYS[2], now - tonumber(ARGV[10]), '+inf')
end
if #set > 0 then redis.call('HSET', KEYS[1], unpack(set)) end
if pruning or not gate then redis.call('PEXPIRE', KEYS[1], ttl) end
return {grant, live, math.max(0, pr), math.max(0, pa), left}
)lua";

} // namespace coretry::redis::detail

#endif
