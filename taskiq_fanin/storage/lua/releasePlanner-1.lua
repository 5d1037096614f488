--[[
  A planner whose dispatch failed gives up its lease: planning the group again
  (a retry of the caller, another process) then takes over at once and
  dispatches the members without an outcome, instead of waiting for the lease
  to run out. Kicking a member twice is harmless.

  KEYS[1] meta

  ARGV[1] token     the group's

  Returns Applied.APPLIED when released, Applied.UNCHANGED when the group is
  missing, not this token's, or planned already.
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'planned')
if meta[1] ~= ARGV[1] or meta[2] == '1' then
  return Applied.UNCHANGED  -- never recreate an expired meta without its TTL
end
-- The lease runs from planner_at: at 0 it ran out long ago (createGroup), and
-- the next planner's first write sets it again.
redis.call('HSET', KEYS[1], 'planner_at', 0)
return Applied.APPLIED
