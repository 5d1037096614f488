--[[
  Cancel a running chain: steps not yet started will not run, and the
  compensations of the steps already completed are handed back to run. Its
  finish time is the cancel's, on Redis's clock.

  The compensations stay (until the record expires): a caller that dies before
  it has started them, or its retry, or the sweep, asks again and is handed the
  same ones (the undo chain's id makes starting them twice start them once).

  KEYS[1] record
  KEYS[2] comps

  Returns {Cancel.NOW, step, member, step undo, compensation, ...} (in step
  order) when cancelled now, {Cancel.BEFORE, ...} the same when cancelled
  before, {Cancel.GONE} when the chain is missing or ended otherwise. ``member`` is the label of the group member the
  chain is, or ''; ``step undo`` the compensation of the step that was running,
  once it has ended, or ''.
]]
local record = redis.call('HMGET', KEYS[1], 'state', 'step', 'member', 'step_undo')
local code = Cancel.BEFORE
if record[1] == 'running' then
  local now = now_ms()
  move(KEYS[1], 'chain', 'running', 'cancelled', 'updated', now, 'finished', now)
  code = Cancel.NOW
elseif record[1] ~= 'cancelled' then
  return {Cancel.GONE}
end
local reply = redis.call('LRANGE', KEYS[2], 0, -1)
table.insert(reply, 1, record[4] or '')
table.insert(reply, 1, record[3] or '')
table.insert(reply, 1, tonumber(record[2]))
table.insert(reply, 1, code)
return reply
