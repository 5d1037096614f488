--[[
  Append one chunk to an unsealed group's ledger, or seal it: no member is
  kicked before its ledger is sealed, and none is added after (invariant 1).
  Writing the same chunk twice (a planner retrying) changes nothing: the
  total counts only the fields this call added.

  KEYS[1] meta      KEYS[2] plan

  ARGV[1] token
  ARGV[2] first     the index of this chunk's first member
  ARGV[3] seal      1: no chunk follows (sealed after this one), 0: more follow
  ARGV[4 ..]        the chunk's members, serialized (none: only seal)

  Returns {Applied.APPLIED, total} when written, {Applied.UNCHANGED, total}
  when the group is missing, not this token's, not open, or sealed already
  (another planner, or the sweep, took over: it kicks what the ledger holds).
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'state', 'sealed', 'total')
-- A meta without 'sealed' was written whole, before chunks were.
if meta[1] ~= ARGV[1] or meta[2] ~= 'open' or (meta[3] or '1') == '1' then
  return {Applied.UNCHANGED, tonumber(meta[4]) or 0}
end
local first = tonumber(ARGV[2])
local added = 0
-- HSET in slices: unpack() of a very wide chunk would overflow Lua's C stack.
local slice = 500
for start = 4, #ARGV, slice do
  local fields = {}
  for arg = start, math.min(start + slice - 1, #ARGV) do
    fields[#fields + 1] = first + arg - 4
    fields[#fields + 1] = ARGV[arg]
  end
  added = added + redis.call('HSET', KEYS[2], unpack(fields))
end
local total = redis.call('HINCRBY', KEYS[1], 'total', added)
redis.call('HSET', KEYS[1], 'planner_at', now_ms(), 'sealed', ARGV[3])
return {Applied.APPLIED, total}
