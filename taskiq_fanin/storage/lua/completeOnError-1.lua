--[[
  A chain's error continuation ran to its end (its last attempt, succeeded or
  not): no copy of it runs any more (beginOnError answers SKIP).

  KEYS[1] record

  ARGV[1] token

  Returns Applied.APPLIED when completed now, Applied.UNCHANGED when the chain
  is missing, not this token's, or its error continuation not running (completed
  already).
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'on_error_state')
if record[1] ~= ARGV[1] or record[2] ~= 'running' then
  return Applied.UNCHANGED
end
move_field(KEYS[1], 'on_error', 'on_error_state', 'running', 'completed',
  'on_error_until', 0)
return Applied.APPLIED
