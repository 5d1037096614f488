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
  no late copy of that holder nor by the retry it kicked). A copy of the
  attempt that released its lease (releaseOnError: it ended, its retry is on
  the way), begun since (a redelivery, a duplicate kick), is a run of its
  own: no later attempt takes its lease over while it is held
  (on_error_released REBEGUN: lease_mark), or both would run to their end; as
  a continuation's and a chain step's guards do. The delivery that released
  never takes the lease again (released_by: its renewal landing late).

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
  'on_error_until', 'on_error_attempt', 'on_error_by', 'on_error_released')
if record[1] ~= ARGV[1] then
  return Begin.RUN
end
local state = record[2] or 'kicked'
if state == 'completed' then
  return Begin.SKIP
end
local now = now_ms()
local attempt = tonumber(ARGV[2])
local recorded = tonumber(record[4]) or 0
local mark = record[6] or ''
if state == 'running' and released_by(record[5], ARGV[3], mark) then
  return Begin.RUNNING_ELSEWHERE  -- its renewal, landing after its release
end
if state == 'running' and record[5] ~= ARGV[3] then
  if not may_take_lease(attempt, recorded, (tonumber(record[3]) or 0) > now,
      ARGV[5], mark) then
    return Begin.RUNNING_ELSEWHERE
  end
end
local lease = {'on_error_until', now + tonumber(ARGV[4]),
  'on_error_attempt', math.max(attempt, recorded), 'on_error_by', ARGV[3],
  'on_error_released', lease_mark(attempt, recorded, mark)}
if state == 'running' then
  redis.call('HSET', KEYS[1], unpack(lease))
  return Begin.RUN
end
move_field(KEYS[1], 'on_error', 'on_error_state', state, 'running', unpack(lease))
return Begin.RUN
