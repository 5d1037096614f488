--[[
  Cancel an open group: no continuation will run, and the group shrinks to its
  meta, its ledger and its done and failed sets, kept a tombstone's time (the
  ledger says which members are chains: the caller cancels those still running,
  and a caller that died half-way leaves them to the next call). Members already
  running still record their outcomes: counted there (so its status says what
  ran), never finalising it (recordOutcome). Members of a group planned as
  cancellable see the state before they run and do not run.

  KEYS[1] meta      KEYS[2] plan     KEYS[3] done    KEYS[4] failed
  KEYS[5] results   KEYS[6] errors   KEYS[7] claim   KEYS[8] window
  (a windowed group releases nothing more: what its outcomes released goes)
  KEYS[9] outcomes  (kept as long as the meta: its readers read the end)

  ARGV[1] tombstone  ms to keep the meta

  Returns Applied.APPLIED when cancelled now, Applied.UNCHANGED when the group
  is missing or not open.
]]
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then
  return Applied.UNCHANGED
end
move(KEYS[1], 'group', 'open', 'cancelled', 'cancelled_at', now_ms())
redis.call('UNLINK', KEYS[5], KEYS[6], KEYS[7], KEYS[8])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[1])
redis.call('PEXPIRE', KEYS[4], ARGV[1])
redis.call('PEXPIRE', KEYS[9], ARGV[1])
return Applied.APPLIED
