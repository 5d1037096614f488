--[[
  The sweep found a failed chain's error continuation (its on_error) lost:
  recheck it on Redis's clock, and say whether to kick it again and as which
  attempt. It writes nothing: the sweep counts the re-kick once its kick
  returned (countRekick), so a kick that failed spends no count. Lost means:
  the running copy's run lease ran out (its worker died); or a copy released
  it for its retry and no retry began by on_error_retry_by (its message
  lost); or no copy began a span (the record's, else ARGV[3]) after the chain
  failed.

  The copy goes as the attempt after the recorded one when a copy began (it
  counts as a failed attempt, so no late copy of it, nor the retry it kicked,
  takes the lease over from this one: may_take_lease), else as attempt 0.

  KEYS[1] record

  ARGV[1] token
  ARGV[2] max re-kicks
  ARGV[3] span      ms: a step's span, when the record keeps none

  Returns {Lost.LOST, re-kicks so far, attempt} when to kick it now;
  {Lost.CAPPED, re-kicks so far, attempt} when lost but its re-kicks are used
  up; {Lost.ON_ITS_WAY, re-kicks so far, 0} when not lost (missing, not this
  token's, not failed, completed, or on its way after all).
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'state', 'on_error_state',
  'on_error_until', 'on_error_attempt', 'on_error_retry_by', 'finished', 'updated',
  'span', 'on_error_redrives')
local redrives = tonumber(record[10]) or 0
if record[1] ~= ARGV[1] or record[2] ~= 'failed' or record[3] == 'completed' then
  return {Lost.ON_ITS_WAY, redrives, 0}
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
  return {Lost.ON_ITS_WAY, redrives, 0}
end
if redrives >= tonumber(ARGV[2]) then
  return {Lost.CAPPED, redrives, attempt}
end
return {Lost.LOST, redrives, attempt}
