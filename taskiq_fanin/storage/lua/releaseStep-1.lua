--[[
  A step's attempt ended without an outcome (the retry middleware will run it
  again): give up its run lease so the retry may run, unless a later attempt
  has taken it over. Marked released: a copy of the same attempt begun since
  is a run of its own, which no later attempt takes over (beginStep).

  KEYS[1] record

  ARGV[1] token
  ARGV[2] step
  ARGV[3] attempt   the attempt that ended
  ARGV[4] delivery  the delivery of it that began (and holds the lease)

  Returns Applied.APPLIED when released, Applied.UNCHANGED otherwise (another
  step, a later attempt, the lease another delivery's or released already:
  may_release, a release applied again frees no copy begun since).
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'run_step', 'run_attempt',
  'run_by', 'run_released')
if record[1] ~= ARGV[1] or record[2] ~= ARGV[2]
    or not may_release(record[4], ARGV[4], record[3], ARGV[3], record[5]) then
  return Applied.UNCHANGED
end
redis.call('HSET', KEYS[1], 'run_until', 0, 'run_released', RELEASED)
return Applied.APPLIED
