--[[
  A step failed for good: the chain stops there, once. It records "failing"
  and hands back the compensations of the steps already completed; once its
  error continuation and compensations are kicked, endFailingChain ends it (a
  chain left failing by a crash in between is finished by the sweep).

  KEYS[1] record
  KEYS[2] comps

  ARGV[1] token
  ARGV[2] step          index of the step that failed
  ARGV[3] error         JSON error summary
  ARGV[4] delivery      this delivery of the step (random), the same when it retries
  ARGV[5] compensation  the step's own compensating signature (JSON), when its
                        body did its work and only its result could not be used;
                        else ''
  ARGV[6] given_up      '1' when the sweep gives the chain up at this step (its
                        step may still be running: should it end, it undoes
                        itself), else ''

  Returns {Failed.FAILING, compensation, ...} (in step order) when the chain is
  failing now, or was made so by this very delivery (its reply was lost);
  {Failed.CANCELLED} when it was cancelled while the step ran, or given up at
  this very step by the sweep (its compensation, if any, is kept: for the
  cancel to hand back, or in 'step_undo'); {Failed.MISSING}
  when the record is missing (expired); {Failed.NOT_NOW} when it was not at
  that step (a duplicate), not this token's, or over.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'state', 'step', 'moved_by',
  'given_up_step')
if not record[1] then
  return {Failed.MISSING}
end
if record[1] ~= ARGV[1] then
  return {Failed.NOT_NOW}
end
local late = given_up_at(record[2], record[5], ARGV[2]) and record[4] ~= ARGV[4]
if record[2] == 'cancelled' or late then
  if ARGV[5] ~= '' and tonumber(record[3]) == tonumber(ARGV[2]) then
    redis.call('HSET', KEYS[1], 'step_undo', ARGV[5])
  end
  return {Failed.CANCELLED}
end
local again = record[2] == 'failing' and record[4] == ARGV[4]
if not again and (record[2] ~= 'running'
    or tonumber(record[3]) ~= tonumber(ARGV[2])) then
  return {Failed.NOT_NOW}
end
if not again then
  move(KEYS[1], 'chain', 'running', 'failing', 'failed_step', ARGV[2],
    'error', ARGV[3], 'updated', now_ms(), 'moved_by', ARGV[4])
  if ARGV[6] == '1' then
    redis.call('HSET', KEYS[1], 'given_up_step', ARGV[2])
  end
  if ARGV[5] ~= '' then
    redis.call('RPUSH', KEYS[2], ARGV[5])
  end
end
local reply = redis.call('LRANGE', KEYS[2], 0, -1)
table.insert(reply, 1, Failed.FAILING)
return reply
