--[[
  Give up on an open group: record the members that never got an outcome as
  lost, and claim the finaliser so the continuation runs with what arrived.
  Members arriving later find the group finalised and change nothing.

  KEYS[1] meta      KEYS[2] plan     KEYS[3] done    KEYS[4] failed
  KEYS[5] claim

  ARGV[1] token
  ARGV[2] lease     ms the finaliser may take before the next sweep takes over
  ARGV[3] claimant  the lease's holder

  Returns {Applied.APPLIED, number of lost members} when claimed,
  {Applied.UNCHANGED} when the group is not open (or missing, or not this
  token's).
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'state')
if meta[1] ~= ARGV[1] or meta[2] ~= 'open' then
  return {Applied.UNCHANGED}
end
local seen = {}
for _, index in ipairs(redis.call('SMEMBERS', KEYS[3])) do seen[index] = true end
for _, index in ipairs(redis.call('SMEMBERS', KEYS[4])) do seen[index] = true end
local lost = {}
for _, index in ipairs(redis.call('HKEYS', KEYS[2])) do
  if not seen[index] then lost[#lost + 1] = index end
end
-- The state is the guard; the key is only the finaliser's lease.
redis.call('SET', KEYS[5], ARGV[3], 'PX', ARGV[2])
local now = now_ms()
move(KEYS[1], 'group', 'open', 'claimed', 'claimed_at', now,
  'lost', table.concat(lost, ','), 'lost_count', #lost, 'given_up_at', now)
return {Applied.APPLIED, #lost}
