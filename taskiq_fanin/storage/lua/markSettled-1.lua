--[[
  The sweep settled what a chain's end may have left undone (the group member's
  outcome it is, a cancel carried out) and watches it on (a failed chain whose
  on_error is to run to its end): note it, so that later visits settle nothing
  again (each would cost a recordOutcome call, and log a group long gone).

  KEYS[1] record

  ARGV[1] token

  Returns Applied.APPLIED when noted now, Applied.UNCHANGED when the chain is
  missing, not this token's, or noted already.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'settled')
if record[1] ~= ARGV[1] or record[2] then
  return Applied.UNCHANGED
end
redis.call('HSET', KEYS[1], 'settled', 1)
return Applied.APPLIED
