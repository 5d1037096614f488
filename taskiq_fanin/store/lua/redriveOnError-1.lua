--[[
  The sweep found a failed chain's error continuation (its on_error) lost:
  recheck it on Redis's clock, count a re-kick, at most a bound of times, and
  say as which attempt the copy goes. Lost means: the running copy's run lease
  ran out (its worker died); or a copy released it for its retry and no retry
  began by on_error_retry_by (its message lost); or no copy began a span
  (the record's, else ARGV[3]) after the chain failed.

  The copy goes as the attempt after the recorded one when a copy began (it
  counts as a failed attempt, so no late copy of it, nor the retry it kicked,
  takes the lease over from this one: may_take_lease), else as attempt 0.

  KEYS[1] record

  ARGV[1] token
  ARGV[2] max re-kicks
  ARGV[3] span      ms: a step's span, when the record keeps none

  Returns {Applied.APPLIED, re-kicks so far, 1, attempt} when to kick it now;
  {Applied.UNCHANGED, re-kicks so far, 1, attempt} when lost but its re-kicks
  are used up; {Applied.UNCHANGED, re-kicks so far, 0, 0} when not lost
  (missing, not this token's, not failed, completed, or on its way after all).
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'state', 'on_error_state',
  'on_error_until', 'on_error_attempt', 'on_error_retry_by', 'finished', 'updated',
  'span', 'on_error_redrives')
local redrives = tonumber(record[10]) or 0
if record[1] ~= ARGV[1] or record[2] ~= 'failed' or record[3] == 'completed' then
  return {Applied.UNCHANGED, redrives, 0, 0}
end
local now = now_ms()
local lost_at
local attempt = 0
if record[3] == 'running' then
  attempt = (tonumber(record[5]) or 0) + 1
  local until_ms = tonumber(record[4]) or 0
  if until_ms > 0 then
    lost_at = until_ms
  else
    lost_at = tonumber(record[6]) or (now + 1)  -- released with no due time: never
  end
else
  local failed_at = tonumber(record[7]) or tonumber(record[8]) or now
  lost_at = failed_at + (tonumber(record[9]) or tonumber(ARGV[3]))
end
if lost_at > now then
  return {Applied.UNCHANGED, redrives, 0, 0}
end
if redrives >= tonumber(ARGV[2]) then
  return {Applied.UNCHANGED, redrives, 1, attempt}
end
redrives = redis.call('HINCRBY', KEYS[1], 'on_error_redrives', 1)
return {Applied.APPLIED, redrives, 1, attempt}
