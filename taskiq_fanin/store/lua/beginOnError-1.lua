--[[
  A delivered error continuation of a chain (its on_error) is about to run: let
  one copy run at a time, and none once one has run to its end. A crash between
  its kick and the chain's 'failed' makes the sweep kick it again, so two copies
  may be delivered. The running copy holds a lease in the chain's record
  (on_error_until, on Redis's clock) that its worker renews by asking again
  while the body runs; a copy redelivered after that worker died runs once the
  lease has run out, and a retry middleware's later attempt takes it over
  (may_take_lease: the recorded attempt never goes down, so the sweep's copy,
  kicked as the attempt after the holder whose worker died, is taken over by
  no late copy of that holder nor by the retry it kicked).

  KEYS[1] record    the failed chain's

  ARGV[1] token     the chain's
  ARGV[2] attempt   0 first, 1 the first retry, ...
  ARGV[3] delivery  this delivery (random): asking again, it holds the lease
  ARGV[4] lease     ms the lease lasts from now (renewed while the body runs)
  ARGV[5] takes_over '0' for the sweep's copy: it takes no held lease over

  Returns Begin.RUN: run it; Begin.SKIP: skip it (a copy ran to its end);
  Begin.RUNNING_ELSEWHERE: skip it (another copy is running). A chain that is
  gone (expired) or of another token: Begin.RUN, since losing the work is worse
  than running it again.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'on_error_state',
  'on_error_until', 'on_error_attempt', 'on_error_by')
if record[1] ~= ARGV[1] then
  return Begin.RUN
end
local state = record[2] or 'kicked'
if state == 'completed' then
  return Begin.SKIP
end
local now = now_ms()
local attempt = tonumber(ARGV[2])
if state == 'running' and record[5] ~= ARGV[3] then
  if not may_take_lease(attempt, tonumber(record[4]) or 0,
      (tonumber(record[3]) or 0) > now, ARGV[5]) then
    return Begin.RUNNING_ELSEWHERE
  end
end
local recorded = math.max(attempt, tonumber(record[4]) or 0)
local lease = {'on_error_until', now + tonumber(ARGV[4]), 'on_error_attempt', recorded,
  'on_error_by', ARGV[3]}
if state == 'running' then
  redis.call('HSET', KEYS[1], unpack(lease))
  return Begin.RUN
end
move_field(KEYS[1], 'on_error', 'on_error_state', state, 'running', unpack(lease))
return Begin.RUN
