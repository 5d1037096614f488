--[[
  A failing chain's error continuation and compensations are kicked: it is
  failed now (its finish time kept, on Redis's clock), and its compensation
  list goes.

  KEYS[1] record
  KEYS[2] comps

  ARGV[1] token

  Returns Applied.APPLIED when failed now, Applied.UNCHANGED when the chain is
  not failing (missing, not this token's, or failed already).
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'state')
if record[1] ~= ARGV[1] or record[2] ~= 'failing' then
  return Applied.UNCHANGED
end
local now = now_ms()
move(KEYS[1], 'chain', 'failing', 'failed', 'updated', now, 'finished', now)
redis.call('DEL', KEYS[2])
return Applied.APPLIED
