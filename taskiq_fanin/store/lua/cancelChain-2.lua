--[[
  Cancel a running chain: steps not yet started will not run, and the
  compensations of the steps already completed are handed back to run.

  KEYS[1] record
  KEYS[2] comps

  Returns {1, step, compensation, ...} (in step order) when cancelled now, {0}
  when the chain is missing or not running.
]]
local record = redis.call('HMGET', KEYS[1], 'state', 'step')
if record[1] ~= 'running' then
  return {0}
end
move(KEYS[1], 'chain', 'running', 'cancelled', 'updated', now_ms())
local reply = redis.call('LRANGE', KEYS[2], 0, -1)
table.insert(reply, 1, tonumber(record[2]))
table.insert(reply, 1, 1)
redis.call('DEL', KEYS[2])
return reply
