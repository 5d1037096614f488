--[[
  The last step finished: the chain is done, once (its finish time kept, on
  Redis's clock).

  KEYS[1] record
  KEYS[2] comps   dropped: nothing is left to undo

  ARGV[1] token
  ARGV[2] step     index of the last step
  ARGV[3] failure  the last step's error summary (JSON) in a chain that keeps
                   going past failures, or ''
  ARGV[4] delivery this delivery of the step (random), the same when it retries
  ARGV[5] outcome  'done' or 'failed': the outcome of the group member the chain
                   is, kept for whoever records it should this worker die; ''
                   when the chain is no member
  ARGV[6] payload  that outcome's result or error (JSON), or ''
  ARGV[7] compensation  the step's compensating signature (JSON), when its body
                   did its work, or ''

  Returns Finished.DONE when the chain is done now, or was made so by this very
  delivery (its reply was lost); Finished.CANCELLED when it was cancelled while
  the step ran, or given up at this very step by the sweep (the step's
  compensation, if any, is kept: for the cancel to hand back, or in
  'step_undo'); Finished.MISSING when the record is missing (expired);
  Finished.NOT_NOW when it was not at that step (a duplicate), not this token's,
  or over.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'state', 'step', 'moved_by',
  'given_up_step')
if not record[1] then
  return Finished.MISSING
end
if record[1] ~= ARGV[1] then
  return Finished.NOT_NOW
end
if record[2] == 'cancelled' or given_up_at(record[2], record[5], ARGV[2]) then
  if ARGV[7] ~= '' and tonumber(record[3]) == tonumber(ARGV[2]) then
    redis.call('HSET', KEYS[1], 'step_undo', ARGV[7])
  end
  return Finished.CANCELLED
end
if record[2] == 'done' and record[4] == ARGV[4] then
  return Finished.DONE
end
if record[2] ~= 'running' or tonumber(record[3]) ~= tonumber(ARGV[2]) then
  return Finished.NOT_NOW
end
local now = now_ms()
move(KEYS[1], 'chain', 'running', 'done', 'step', tonumber(ARGV[2]) + 1,
  'updated', now, 'finished', now, 'moved_by', ARGV[4])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'failure:' .. ARGV[2], ARGV[3])
end
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'outcome', ARGV[5], 'payload', ARGV[6])
end
redis.call('DEL', KEYS[2])
return Finished.DONE
