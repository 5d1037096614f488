--[[
  The last step finished: the chain is done, once.

  KEYS[1] record
  KEYS[2] comps   dropped: nothing is left to undo

  ARGV[1] token
  ARGV[2] step    index of the last step
  ARGV[3] now     epoch ms

  Returns 1 when the chain is done now, 0 when it was not at that step
  (a duplicate), missing, not this token's, or over.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'state', 'step')
if record[1] ~= ARGV[1] or record[2] ~= 'running'
    or tonumber(record[3]) ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'done', 'step', tonumber(ARGV[2]) + 1,
  'updated', ARGV[3])
redis.call('DEL', KEYS[2])
return 1
