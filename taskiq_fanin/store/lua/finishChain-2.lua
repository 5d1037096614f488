--[[
  The last step finished: the chain is done, once.

  KEYS[1] record
  KEYS[2] comps   dropped: nothing is left to undo

  ARGV[1] token
  ARGV[2] step    index of the last step
  ARGV[3] failure the last step's error summary (JSON) in a chain that keeps
                  going past failures, or ''

  Returns 1 when the chain is done now, 0 when it was not at that step
  (a duplicate), missing, not this token's, or over.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'state', 'step')
if record[1] ~= ARGV[1] or record[2] ~= 'running'
    or tonumber(record[3]) ~= tonumber(ARGV[2]) then
  return 0
end
move(KEYS[1], 'chain', 'running', 'done', 'step', tonumber(ARGV[2]) + 1,
  'updated', now_ms())
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'failure:' .. ARGV[2], ARGV[3])
end
redis.call('DEL', KEYS[2])
return 1
