--[[
  Note that every member of a group has been dispatched, so the sweep can tell a
  planner that died mid-dispatch from a group whose members are merely slow.

  KEYS[1] meta

  ARGV[1] token

  Returns Applied.APPLIED when noted, Applied.UNCHANGED when the group is
  missing or not this token's.
]]
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return Applied.UNCHANGED  -- never recreate an expired meta without its TTL
end
redis.call('HSET', KEYS[1], 'planned', 1)
return Applied.APPLIED
