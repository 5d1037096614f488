--[[
  A running chain waits on its group step, and that group is on time: a
  windowed group runs for as long as its width takes, its deadline sliding
  with each outcome and its keys kept a ttl more near their expiry. The sweep
  keeps the chain's record (and its compensations) alive as long as the
  group's keys, so that the chain is still there when the group's
  continuation moves it on. Nothing else changes: not the step, not when the
  chain last moved.

  KEYS[1] record
  KEYS[2] comps

  ARGV[1] token
  ARGV[2] step     the group step's index
  ARGV[3] until    epoch ms (Redis's clock: the group's own expiry) to live to

  Returns Applied.APPLIED when the record's life was pushed to until,
  Applied.UNCHANGED when the chain is not running at that step (missing, not
  this token's, over, moved on) or already lives that long.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'state', 'step')
if record[1] ~= ARGV[1] or record[2] ~= 'running'
    or tonumber(record[3]) ~= tonumber(ARGV[2]) then
  return Applied.UNCHANGED
end
local left = redis.call('PTTL', KEYS[1])
local until_ms = tonumber(ARGV[3])
if left >= 0 and now_ms() + left >= until_ms then
  return Applied.UNCHANGED
end
redis.call('PEXPIREAT', KEYS[1], until_ms)
redis.call('PEXPIREAT', KEYS[2], until_ms)
return Applied.APPLIED
