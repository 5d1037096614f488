--[[
  Cancel an open group: no continuation will run. Members still record their
  outcomes into nothing (the group is no longer open), and members of a group
  planned as cancellable see the state before they run and do not run.

  KEYS[1] meta      KEYS[2] plan     KEYS[3] done    KEYS[4] failed
  KEYS[5] results   KEYS[6] errors   KEYS[7] claim

  ARGV[1] now       epoch ms

  Returns 1 when cancelled now, 0 when the group is missing or not open.
]]
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'cancelled_at', ARGV[1])
redis.call('DEL', KEYS[7])
return 1
