--[[
  A step's attempt ended without an outcome (the retry middleware will run it
  again): give up its run lease so the retry may run, unless a later attempt
  has taken it over. Marked released: a copy of the same attempt begun since
  is a run of its own, which no later attempt takes over (beginStep).

  KEYS[1] record

  ARGV[1] token
  ARGV[2] step
  ARGV[3] attempt   the attempt that ended

  Returns Applied.APPLIED when released, Applied.UNCHANGED otherwise.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'run_step', 'run_attempt')
if record[1] ~= ARGV[1] or record[2] ~= ARGV[2]
    or (tonumber(record[3]) or 0) ~= tonumber(ARGV[3]) then
  return Applied.UNCHANGED
end
redis.call('HSET', KEYS[1], 'run_until', 0, 'run_released', 'released')
return Applied.APPLIED
