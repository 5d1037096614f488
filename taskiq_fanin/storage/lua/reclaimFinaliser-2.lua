--[[
  The sweep takes over a finaliser whose lease ran out before it dispatched
  the continuation: claim the lease again, so that a finaliser that was only
  slow and the sweep cannot both go on unnoticed.

  KEYS[1] meta      KEYS[2] claim

  ARGV[1] token
  ARGV[2] lease     ms
  ARGV[3] claimant

  Returns Applied.APPLIED when the sweep holds the lease now, Applied.UNCHANGED
  when the group is not claimed (missing, of another token, or dispatched
  meanwhile) or the lease is held.
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'state')
if meta[1] ~= ARGV[1] or meta[2] ~= 'claimed' then
  return Applied.UNCHANGED
end
if not redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[2]) then
  return Applied.UNCHANGED
end
redis.call('HSET', KEYS[1], 'reclaimed_at', now_ms())
return Applied.APPLIED
