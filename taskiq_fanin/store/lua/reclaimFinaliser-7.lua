--[[
  The sweep takes over a finaliser whose lease ran out before it dispatched
  the continuation: claim the lease again, so that a finaliser that was only
  slow and the sweep cannot both go on unnoticed.

  KEYS[1] meta      KEYS[2] plan     KEYS[3] done    KEYS[4] failed
  KEYS[5] results   KEYS[6] errors   KEYS[7] claim

  ARGV[1] token
  ARGV[2] lease     ms
  ARGV[3] claimant

  Returns 1 when the sweep holds the lease now, 0 when the group is not claimed
  (missing, of another token, or dispatched meanwhile) or the lease is held.
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'state')
if meta[1] ~= ARGV[1] or meta[2] ~= 'claimed' then
  return 0
end
if not redis.call('SET', KEYS[7], ARGV[3], 'NX', 'PX', ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], 'reclaimed_at', now_ms())
return 1
