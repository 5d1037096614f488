--[[
  Plan a group: write its meta and its ledger in one step, before any member is
  dispatched (invariant 1). Planning the same group id twice changes nothing.

  KEYS[1] meta      KEYS[2] plan     KEYS[3] done    KEYS[4] failed
  KEYS[5] results   KEYS[6] errors   KEYS[7] claim

  ARGV[1] token             random per group; members carry it in their labels
  ARGV[2] now               epoch ms
  ARGV[3] deadline          epoch ms
  ARGV[4] expires           epoch ms: when every key of the group expires
  ARGV[5] options           how many name/value pairs follow: the group's options
                            (continuations, policies, span, ttl, depth,
                            cancellable), written into the meta as they are
  ARGV[6 .. 5 + 2 * options]        name, value, name, value, ...
  ARGV[6 + 2 * options]             total: number of members
  ARGV[7 + 2 * options .. ]         member 0 .. total - 1, serialized

  Returns {1, token} when created, {2, token, planned, created} when the group
  exists (planned is '0' while its planner dispatches, or if it died doing so).
]]
local existing = redis.call('HMGET', KEYS[1], 'token', 'planned', 'created')
if existing[1] then
  return {2, existing[1], existing[2], existing[3]}
end

local options = tonumber(ARGV[5])
local total = tonumber(ARGV[6 + 2 * options])
local first_member = 7 + 2 * options
redis.call('HSET', KEYS[1],
  'token', ARGV[1], 'state', 'open', 'created', ARGV[2], 'deadline', ARGV[3],
  'expires', ARGV[4], 'total', total,
  'done_count', 0, 'failed_count', 0, 'planned', 0, 'redrives', 0)
if options > 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 6, 5 + 2 * options))
end

-- HSET in slices: unpack() of a very wide group would overflow Lua's C stack.
local slice = 500
for first = 0, total - 1, slice do
  local last = math.min(first + slice, total) - 1
  local fields = {}
  for index = first, last do
    fields[#fields + 1] = index
    fields[#fields + 1] = ARGV[first_member + index]
  end
  redis.call('HSET', KEYS[2], unpack(fields))
end

redis.call('PEXPIREAT', KEYS[1], ARGV[4])
redis.call('PEXPIREAT', KEYS[2], ARGV[4])
return {1, ARGV[1]}
