--[[
  The sweep dispatched an overdue continuation again (checkContinuation said
  so, and its kick returned): count it, and note when, so the copy has a span
  to begin before the next. Counted after the kick, only what was sent is
  counted: a kick that failed (broker down, Redis away) spends nothing, and
  the next sweep dispatches it again. Counted before the dispatch is
  recorded (finalise's ``kicked``): a copy that went is counted even when
  that record then fails, which would otherwise repeat at every visit.

  Check, kick, count is safe because sweeps are serialised by the sweep lock:
  no other sweep dispatches it between this one's check and its count. Two
  sweeps racing anyway (the lock ran out) at worst kick one extra copy, which
  its run guard keeps from running beside another; both are counted. A count
  that fails after its kick went (its reply lost) leaves that copy uncounted:
  the next sweep may dispatch one more, which the run guard again keeps to one
  run: the safe direction (a count of a copy never sent would strand it).

  KEYS[1] meta

  ARGV[1] token

  Returns {Applied.APPLIED, re-dispatches so far} when counted;
  {Applied.UNCHANGED, re-dispatches so far} when the group is missing, not
  this token's, or no longer dispatched or running (it completed meanwhile).
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'state', 'continuation_redrives')
local state = meta[2]
if meta[1] ~= ARGV[1] or (state ~= 'dispatched' and state ~= 'running') then
  return {Applied.UNCHANGED, tonumber(meta[3]) or 0}
end
local redrives = redis.call('HINCRBY', KEYS[1], 'continuation_redrives', 1)
redis.call('HSET', KEYS[1], 'continuation_redriven_at', now_ms())
return {Applied.APPLIED, redrives}
