--[[
  Create a chain's workflow record before its first step is kicked. Starting the
  same chain id twice changes nothing.

  KEYS[1] record   hash: token, state, step, steps, names, started, updated,
                   error, failed_step
  KEYS[2] comps    list: compensations of the completed steps, in step order

  ARGV[1] token
  ARGV[2] now      epoch ms
  ARGV[3] steps    number of steps
  ARGV[4] names    JSON list of the steps' names
  ARGV[5] ttl      ms the record lives (renewed at every transition)
  ARGV[6] pending  the first step's kick (JSON), for the sweep to repeat if lost

  Returns 1 when created, 0 when the chain exists.
]]
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'state', 'running', 'step', 0,
  'steps', ARGV[3], 'names', ARGV[4], 'started', ARGV[2], 'updated', ARGV[2],
  'pending', ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
