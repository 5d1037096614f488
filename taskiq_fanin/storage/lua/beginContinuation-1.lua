--[[
  A delivered continuation is about to run: let one copy run at a time, and
  none once the continuation has completed (invariant 3). The running copy holds
  a lease in the meta (run_until, on Redis's clock) that its worker renews by
  asking again while the body runs; a copy redelivered after that worker died
  runs once the lease has run out. The continuation may start before its
  finaliser has recorded the dispatch.

  A retry middleware kicks the next attempt of a failed one before that failed
  attempt's worker has released its lease: the next attempt (run_attempt + 1)
  takes the lease over, a copy of the same attempt does not, and one of an
  earlier attempt never runs (may_take_lease; run_attempt never goes down). A
  copy of the attempt that released its lease (releaseContinuation: it ended,
  its retry is on the way), begun since (a redelivery, a duplicate kick), is a
  run of its own: no later attempt takes its lease over while it is held
  (run_released REBEGUN: lease_mark), or both would run to their end; as a
  chain step's and an on_error's guards do. The delivery that released never
  takes the lease again (released_by: its renewal landing late).

  KEYS[1] meta

  ARGV[1] token
  ARGV[2] attempt   0 first, 1 the first retry, ...
  ARGV[3] delivery  this delivery (random): asking again, it holds the lease
  ARGV[4] lease     ms the lease lasts from now (renewed while the body runs)
  ARGV[5] takes_over '0' for the sweep's copy: it takes no held lease over

  Returns Begin.RUN: run it; Begin.SKIP: skip it (completed, or cancelled);
  Begin.RUNNING_ELSEWHERE: skip it (another copy is running). A group that is
  gone (expired) or of another token: Begin.RUN, since losing the work is worse
  than running it again.
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'state', 'run_until',
  'run_attempt', 'run_by', 'run_released')
if meta[1] ~= ARGV[1] then
  return Begin.RUN
end
local state = meta[2]
if state == 'running' then
  local now = now_ms()
  local attempt = tonumber(ARGV[2])
  local recorded = tonumber(meta[4]) or 0
  local mark = meta[6] or ''
  if released_by(meta[5], ARGV[3], mark) then
    return Begin.RUNNING_ELSEWHERE  -- its renewal, landing after its release
  end
  if meta[5] ~= ARGV[3]
      and not may_take_lease(attempt, recorded, (tonumber(meta[3]) or 0) > now,
        ARGV[5], mark) then
    return Begin.RUNNING_ELSEWHERE
  end
  redis.call('HSET', KEYS[1], 'run_until', now + tonumber(ARGV[4]),
    'run_attempt', math.max(attempt, recorded), 'run_by', ARGV[3],
    'run_released', lease_mark(attempt, recorded, mark))
  return Begin.RUN
end
if not may_move('group', state, 'running') then
  return Begin.SKIP  -- completed, cancelled (or still open: not this group's turn)
end
local now = now_ms()
move(KEYS[1], 'group', state, 'running', 'started_at', now,
  'run_until', now + tonumber(ARGV[4]), 'run_attempt', ARGV[2], 'run_by', ARGV[3])
return Begin.RUN
