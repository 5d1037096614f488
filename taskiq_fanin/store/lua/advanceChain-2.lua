--[[
  Step ARGV[2] finished: move the chain to the next step, exactly once however
  often the step ran, and remember how to undo the step.

  KEYS[1] record
  KEYS[2] comps

  ARGV[1] token
  ARGV[2] step          index of the step that finished
  ARGV[3] now           epoch ms
  ARGV[4] compensation  the step's compensating signature (JSON) or ''
  ARGV[5] ttl           ms the record lives from now
  ARGV[6] pending       the next step's kick (JSON), for the sweep to repeat if lost

  Returns 1 when advanced (kick the next step), 2 when the step was already
  advanced past (a duplicate), 3 when the chain is cancelled, 0 when the chain
  is missing, not this token's, or over.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'state', 'step')
if record[1] ~= ARGV[1] then
  return 0
end
if record[2] == 'cancelled' then
  return 3
end
if record[2] ~= 'running' then
  return 0
end
if tonumber(record[3]) ~= tonumber(ARGV[2]) then
  return 2
end
redis.call('HSET', KEYS[1], 'step', tonumber(ARGV[2]) + 1, 'updated', ARGV[3],
  'pending', ARGV[6])
if ARGV[4] ~= '' then
  redis.call('RPUSH', KEYS[2], ARGV[4])
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
