--[[
  A step failed for good: the chain stops there, once. It records "failing"
  and hands back the compensations of the steps already completed; once its
  error continuation and compensations are kicked, failedChain ends it (a
  chain left failing by a crash in between is finished by the sweep).

  KEYS[1] record
  KEYS[2] comps

  ARGV[1] token
  ARGV[2] step    index of the step that failed
  ARGV[3] error   JSON error summary
  ARGV[4] delivery this delivery of the step (random), the same when it retries

  Returns {1, compensation, ...} (in step order) when the chain is failing now,
  or was made so by this very delivery (its reply was lost); {0} when it was not
  at that step (a duplicate), missing, not this token's, or over.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'state', 'step', 'moved_by')
if record[1] ~= ARGV[1] then
  return {0}
end
local again = record[2] == 'failing' and record[4] == ARGV[4]
if not again and (record[2] ~= 'running'
    or tonumber(record[3]) ~= tonumber(ARGV[2])) then
  return {0}
end
if not again then
  move(KEYS[1], 'chain', 'running', 'failing', 'failed_step', ARGV[2],
    'error', ARGV[3], 'updated', now_ms(), 'moved_by', ARGV[4])
end
local reply = redis.call('LRANGE', KEYS[2], 0, -1)
table.insert(reply, 1, 1)
return reply
