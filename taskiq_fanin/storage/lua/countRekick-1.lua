--[[
  The sweep kicked a failed chain's lost error continuation (its on_error)
  again (checkOnError said so, and its kick returned): count it. Counted after
  the kick, only what was sent is counted: a kick that failed (broker down,
  Redis away) spends nothing, and the next sweep kicks it again.

  Check, kick, count is safe because sweeps are serialised by the sweep lock:
  no other sweep kicks it between this one's check and its count. Two sweeps
  racing anyway (the lock ran out) at worst kick one extra copy, which its run
  guard keeps from running beside another; both are counted. A count that
  fails after its kick went (its reply lost) leaves that copy uncounted: the
  next sweep may kick one more, which the run guard again keeps to one run:
  the safe direction (a count of a copy never sent would strand it).

  KEYS[1] record

  ARGV[1] token

  Returns {Applied.APPLIED, re-kicks so far} when counted; {Applied.UNCHANGED,
  re-kicks so far} when the chain is missing, not this token's, not failed, or
  its error continuation completed meanwhile.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'state', 'on_error_state',
  'on_error_redrives')
if record[1] ~= ARGV[1] or record[2] ~= 'failed' or record[3] == 'completed' then
  return {Applied.UNCHANGED, tonumber(record[4]) or 0}
end
return {Applied.APPLIED, redis.call('HINCRBY', KEYS[1], 'on_error_redrives', 1)}
