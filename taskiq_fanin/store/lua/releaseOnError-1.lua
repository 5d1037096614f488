--[[
  An attempt of a chain's error continuation ended without an outcome (the
  retry middleware will run it again): give up its run lease so the retry may
  run, unless a later attempt has taken it over. It stays running.

  KEYS[1] record

  ARGV[1] token
  ARGV[2] attempt   the attempt that ended

  Returns Applied.APPLIED when released, Applied.UNCHANGED when the chain is
  missing, not this token's, its error continuation not running, or running a
  later attempt.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'on_error_state',
  'on_error_attempt')
if record[1] ~= ARGV[1] or record[2] ~= 'running'
    or (tonumber(record[3]) or 0) ~= tonumber(ARGV[2]) then
  return Applied.UNCHANGED
end
redis.call('HSET', KEYS[1], 'on_error_until', 0)
return Applied.APPLIED
