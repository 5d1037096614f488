--[[
  The finaliser has enqueued the continuation: record which one, and release the
  lease if it is still the finaliser's. The continuation may already be running,
  or even completed (it can start before this is recorded). A continuation of
  'none' (no continuation applies) completes the group.

  KEYS[1] meta      KEYS[2] plan     KEYS[3] done    KEYS[4] failed
  KEYS[5] results   KEYS[6] errors   KEYS[7] claim   KEYS[8] lost
  KEYS[9] outcomes  (kept as long as the meta: its readers read the end)

  ARGV[1] token
  ARGV[2] dispatched 'then' | 'on_error' | 'none'
  ARGV[3] tombstone  ms a completed group's meta is kept to absorb late duplicates
  ARGV[4] claimant   who dispatched: the lease is released only if it is theirs

  Returns Applied.APPLIED when recorded, Applied.UNCHANGED when the group is
  missing, not this token's, not claimed (or past it), or its dispatch is
  recorded already.
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'state', 'dispatched')
if meta[1] ~= ARGV[1] or meta[3] then
  return Applied.UNCHANGED
end
local state = meta[2]
if state ~= 'claimed' and state ~= 'running' and state ~= 'completed' then
  return Applied.UNCHANGED
end
local now = now_ms()
redis.call('HSET', KEYS[1], 'dispatched', ARGV[2], 'dispatched_at', now)
if state == 'completed' then
  return Applied.APPLIED  -- the continuation ran and completed before this was recorded
end
if redis.call('GET', KEYS[7]) == ARGV[4] then
  redis.call('UNLINK', KEYS[7])
end
if ARGV[2] ~= 'none' then
  if state == 'claimed' then
    move(KEYS[1], 'group', 'claimed', 'dispatched')
  end
  return Applied.APPLIED
end
move(KEYS[1], 'group', state, 'completed', 'completed_at', now)
redis.call('UNLINK', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[9], ARGV[3])
return Applied.APPLIED
