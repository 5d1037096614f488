--[[
  The continuation ran to its end: shrink the group to a tombstone (its meta,
  with a short TTL) so a redelivered continuation or a late member changes nothing.
  A group whose results went by reference keeps them (and its lost set) as
  long as the tombstone (a chain's next step may still read them), not a
  moment less.

  KEYS[1] meta      KEYS[2] plan     KEYS[3] done    KEYS[4] failed
  KEYS[5] results   KEYS[6] errors   KEYS[7] claim   KEYS[8] lost
  KEYS[9] outcomes  (kept as long as the meta: its readers read the end)

  ARGV[1] token
  ARGV[2] tombstone  ms to keep the meta

  Returns Applied.APPLIED when completed now, Applied.UNCHANGED when missing,
  not this token's, or in a state that cannot complete (open, cancelled,
  completed already). The claim key (the
  running copy's lease) goes with the rest.
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'state', 'total', 'inline_max')
if meta[1] ~= ARGV[1] or not may_move('group', meta[2], 'completed') then
  return Applied.UNCHANGED
end
move(KEYS[1], 'group', meta[2], 'completed', 'completed_at', now_ms())
if by_reference(meta[3], meta[4]) then
  redis.call('UNLINK', KEYS[2], KEYS[7])
  for _, key in ipairs({3, 4, 5, 6, 8}) do redis.call('PEXPIRE', KEYS[key], ARGV[2]) end
else
  redis.call('UNLINK', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[9], ARGV[2])
return Applied.APPLIED
