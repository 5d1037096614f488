--[[
  The sweep found a group's continuation overdue: recheck it on Redis's clock,
  and say whether to dispatch it again and as which attempt. It writes
  nothing: the sweep counts the re-dispatch once its kick returned
  (countRedispatch), so a kick that failed spends no count. Overdue means:
  dispatched or running, with no run lease held (no copy running, or its
  worker died), a span past its dispatch, or past the sweep's last re-dispatch
  of it (each copy has its span to begin); a lease released for its retry
  (run_released, by releaseContinuation), past its retry's span to begin
  (run_retry_by) as well: until then the retry is on its way, not lost. A
  group running before its dispatch was recorded (its finaliser died between
  the kick and markDispatched) has no dispatched_at: its claim's time stands
  for it (else the copy's start), not 0.

  The copy goes as the attempt after the recorded one when a copy began (it
  counts as a failed attempt, so no late copy of it, nor the retry it kicked,
  takes the lease over from this one: may_take_lease), else as attempt 0.

  KEYS[1] meta

  ARGV[1] token
  ARGV[2] max re-dispatches

  Returns {Lost.LOST, re-dispatches so far, attempt} when to dispatch it now;
  {Lost.CAPPED, re-dispatches so far, attempt} when overdue but its
  re-dispatches are used up; {Lost.ON_ITS_WAY, re-dispatches so far, 0} when
  not overdue (missing, not this token's, not dispatched or running, its run
  lease held, or within its span after all).
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'state', 'dispatched_at', 'span',
  'run_until', 'run_attempt', 'continuation_redrives', 'continuation_redriven_at',
  'run_released', 'run_retry_by', 'claimed_at', 'started_at')
local redrives = tonumber(meta[7]) or 0
local state = meta[2]
if meta[1] ~= ARGV[1] or (state ~= 'dispatched' and state ~= 'running') then
  return {Lost.ON_ITS_WAY, redrives, 0}
end
local now = now_ms()
local dispatched_at = tonumber(meta[3]) or tonumber(meta[11]) or tonumber(meta[12])
local since = math.max(dispatched_at or 0, tonumber(meta[8]) or 0)
local lost_at = since + (tonumber(meta[4]) or 0)
local attempt = 0
if state == 'running' then
  if (tonumber(meta[5]) or 0) > now then
    return {Lost.ON_ITS_WAY, redrives, 0}  -- a copy runs: its lease holds
  end
  if meta[9] == RELEASED then
    -- Its retry's span to begin (a release from before run_retry_by: none).
    lost_at = math.max(lost_at, tonumber(meta[10]) or 0)
  end
  attempt = (tonumber(meta[6]) or 0) + 1
end
if lost_at > now then
  return {Lost.ON_ITS_WAY, redrives, 0}
end
if redrives >= tonumber(ARGV[2]) then
  return {Lost.CAPPED, redrives, attempt}
end
return {Lost.LOST, redrives, attempt}
