--[[
  Take back a group whose planner found a bad member in a later chunk (members
  from an iterator are checked chunk by chunk): nothing was kicked, as its
  ledger was never sealed, so nothing of it may stay (invariant 8). UNLINK:
  the ledger is freed off Redis's main thread, however wide it grew.

  KEYS[1] meta      KEYS[2] plan

  ARGV[1] token

  Returns Applied.APPLIED when removed, Applied.UNCHANGED when the group is
  missing, not this token's, or sealed (members may run: it stays).
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'sealed')
if meta[1] ~= ARGV[1] or (meta[2] or '1') == '1' then
  return Applied.UNCHANGED
end
redis.call('UNLINK', KEYS[1], KEYS[2])
return Applied.APPLIED
