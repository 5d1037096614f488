--[[
  A step failed for good: the chain stops there, once, and hands back the
  compensations of the steps already completed.

  KEYS[1] record
  KEYS[2] comps

  ARGV[1] token
  ARGV[2] step    index of the step that failed
  ARGV[3] now     epoch ms
  ARGV[4] error   JSON error summary

  Returns {1, compensation, ...} (in step order) when the chain failed now, {0} when it
  was not at that step (a duplicate), missing, not this token's, or over.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'state', 'step')
if record[1] ~= ARGV[1] or record[2] ~= 'running'
    or tonumber(record[3]) ~= tonumber(ARGV[2]) then
  return {0}
end
redis.call('HSET', KEYS[1], 'state', 'failed', 'failed_step', ARGV[2],
  'error', ARGV[4], 'updated', ARGV[3])
local reply = redis.call('LRANGE', KEYS[2], 0, -1)
table.insert(reply, 1, 1)
redis.call('DEL', KEYS[2])
return reply
