--[[
  Plan a group: write its meta and its ledger in one step, before any member is
  dispatched (invariant 1). Planning the same group id twice changes nothing.

  KEYS[1] meta      KEYS[2] plan     KEYS[3] done    KEYS[4] failed
  KEYS[5] results   KEYS[6] errors   KEYS[7] claim

  ARGV[1] token             random per group; members carry it in their labels
  ARGV[2] now               epoch ms
  ARGV[3] deadline          epoch ms
  ARGV[4] expires           epoch ms: when every key of the group expires
  ARGV[5] then              continuation signature (JSON) or ''
  ARGV[6] on_error          error continuation signature (JSON) or ''
  ARGV[7] failure policy    'continue' | 'fail'
  ARGV[8] sweep policy      'report' | 'redrive' | 'give_up'
  ARGV[9] span              ms from planning (or a re-drive) to the deadline
  ARGV[10] depth            nesting level of the group in groups and chains
  ARGV[11] cancellable      '1' when members check for cancellation first, else '0'
  ARGV[12] total            number of members
  ARGV[13 .. 12 + total]    member 0 .. total - 1, serialized

  Returns {1, token} when created, {2, token, planned, created} when the group
  exists (planned is '0' while its planner dispatches, or if it died doing so).
]]
local existing = redis.call('HMGET', KEYS[1], 'token', 'planned', 'created')
if existing[1] then
  return {2, existing[1], existing[2], existing[3]}
end

local total = tonumber(ARGV[12])
redis.call('HSET', KEYS[1],
  'token', ARGV[1], 'state', 'open', 'created', ARGV[2], 'deadline', ARGV[3],
  'expires', ARGV[4], 'then', ARGV[5], 'on_error', ARGV[6], 'policy', ARGV[7],
  'sweep', ARGV[8], 'span', ARGV[9], 'depth', ARGV[10], 'cancellable', ARGV[11],
  'total', total,
  'done_count', 0, 'failed_count', 0, 'planned', 0, 'redrives', 0)

-- HSET in slices: unpack() of a very wide group would overflow Lua's C stack.
local slice = 500
for first = 0, total - 1, slice do
  local last = math.min(first + slice, total) - 1
  local fields = {}
  for index = first, last do
    fields[#fields + 1] = index
    fields[#fields + 1] = ARGV[13 + index]
  end
  redis.call('HSET', KEYS[2], unpack(fields))
end

redis.call('PEXPIREAT', KEYS[1], ARGV[4])
redis.call('PEXPIREAT', KEYS[2], ARGV[4])
return {1, ARGV[1]}
