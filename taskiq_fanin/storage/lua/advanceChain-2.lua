--[[
  Step ARGV[2] finished: move the chain to the next step, exactly once however
  often the step ran, and remember how to undo the step (or, in a chain that
  keeps going past failures, the step's failure).

  KEYS[1] record
  KEYS[2] comps

  ARGV[1] token
  ARGV[2] step          index of the step that finished
  ARGV[3] compensation  the step's compensating signature (JSON) or ''
  ARGV[4] ttl           ms the record lives from now
  ARGV[5] pending       the next step's kick (JSON), for the sweep to repeat if lost
  ARGV[6] failure       the step's error summary (JSON) when it failed, or ''
  ARGV[7] delivery      this delivery of the step (random), the same when it retries

  Returns Advanced.ADVANCED when advanced (kick the next step), or advanced by
  this very delivery before (its reply was lost: kick it again);
  Advanced.DUPLICATE when the step was already advanced past by another;
  Advanced.CANCELLED when the chain is cancelled, or was given up at this
  very step by the sweep (the step undoes itself: its compensation is kept in
  'step_undo'); Advanced.GONE when the chain
  is missing, not this token's, or over.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'state', 'step', 'moved_by',
  'given_up_step')
if record[1] ~= ARGV[1] then
  return Advanced.GONE
end
if record[2] == 'cancelled' or given_up_at(record[2], record[5], ARGV[2]) then
  -- The step ran while the chain was cancelled: its compensation is kept for
  -- whoever carries the cancel out again (a crash may stop this worker's).
  if ARGV[3] ~= '' and tonumber(record[3]) == tonumber(ARGV[2]) then
    redis.call('HSET', KEYS[1], 'step_undo', ARGV[3])
  end
  return Advanced.CANCELLED
end
if record[2] ~= 'running' then
  return Advanced.GONE
end
if tonumber(record[3]) ~= tonumber(ARGV[2]) then
  if tonumber(record[3]) == tonumber(ARGV[2]) + 1 and record[4] == ARGV[7] then
    return Advanced.ADVANCED
  end
  return Advanced.DUPLICATE
end
redis.call('HSET', KEYS[1], 'step', tonumber(ARGV[2]) + 1, 'updated', now_ms(),
  'pending', ARGV[5], 'moved_by', ARGV[7])
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[1], 'failure:' .. ARGV[2], ARGV[6])
end
if ARGV[3] ~= '' then
  redis.call('RPUSH', KEYS[2], ARGV[3])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return Advanced.ADVANCED
