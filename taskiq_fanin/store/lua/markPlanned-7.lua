--[[
  Note that every member of a group has been dispatched, so the sweep can tell a
  planner that died mid-dispatch from a group whose members are merely slow.

  KEYS[1] meta      KEYS[2] plan     KEYS[3] done    KEYS[4] failed
  KEYS[5] results   KEYS[6] errors   KEYS[7] claim

  ARGV[1] token

  Returns 1 when noted, 0 when the group is missing or not this token's.
]]
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0  -- never recreate an expired meta without its TTL
end
redis.call('HSET', KEYS[1], 'planned', 1)
return 1
