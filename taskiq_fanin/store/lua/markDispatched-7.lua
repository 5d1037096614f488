--[[
  The finaliser has enqueued the continuation: record which one, and release the
  lease if it is still the finaliser's. The continuation may already be running,
  or even completed (it can start before this is recorded). A continuation of 'none' (no
  continuation applies) completes the group.

  KEYS[1] meta      KEYS[2] plan     KEYS[3] done    KEYS[4] failed
  KEYS[5] results   KEYS[6] errors   KEYS[7] claim

  ARGV[1] token
  ARGV[2] now        epoch ms
  ARGV[3] dispatched 'then' | 'on_error' | 'none'
  ARGV[4] tombstone  ms a completed group's meta is kept to absorb late duplicates
  ARGV[5] claimant   who dispatched: the lease is released only if it is theirs

  Returns 1 when recorded, 0 when the group is missing, not this token's, or
  its dispatch is recorded already.
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'state', 'dispatched')
if meta[1] ~= ARGV[1] or meta[3] then
  return 0
end
if meta[2] == 'completed' then
  -- The continuation ran and completed before this was recorded.
  redis.call('HSET', KEYS[1], 'dispatched', ARGV[3], 'dispatched_at', ARGV[2])
  return 1
end
if meta[2] ~= 'claimed' and meta[2] ~= 'running' then
  return 0
end
redis.call('HSET', KEYS[1], 'dispatched', ARGV[3], 'dispatched_at', ARGV[2])
if redis.call('GET', KEYS[7]) == ARGV[5] then
  redis.call('DEL', KEYS[7])
end
if ARGV[3] ~= 'none' then
  if meta[2] == 'claimed' then
    redis.call('HSET', KEYS[1], 'state', 'dispatched')
  end
  return 1
end
redis.call('HSET', KEYS[1], 'state', 'completed', 'completed_at', ARGV[2])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
