--[[
  A delivered chain step is about to run: only while the chain runs and is at
  that step, and one copy at a time. The running copy holds a lease in the
  record (run_until, on Redis's clock) that its worker renews by asking again
  while the body runs; a copy redelivered after that worker died runs once the
  lease has run out, and a retry middleware's next attempt takes it over
  (may_take_lease: the recorded attempt never goes down). A copy of the
  attempt that released its lease (releaseStep: it ended, its retry is on the
  way), begun since (kicked again: a retried start, a group re-kicking its
  chain member), is a run of its own: no later attempt takes its lease over
  while it is held (run_released REBEGUN: lease_mark), or both would run to
  their end. The delivery that released never takes the lease again
  (released_by: its renewal landing late). The continuation's and on_error's
  guards apply the same rule.

  KEYS[1] record

  ARGV[1] token
  ARGV[2] step      the step's index
  ARGV[3] attempt   0 first, 1 the first retry, ...
  ARGV[4] delivery  this delivery (random): asking again, it holds the lease
  ARGV[5] lease     ms the lease lasts from now (renewed while the body runs)
  ARGV[6] takes_over '0' for the sweep's copy: it takes no held lease over

  Returns Begin.RUN: run it; Begin.SKIP: skip it (the chain is past this step,
  over, cancelled, or not this token's); Begin.RUNNING_ELSEWHERE: skip it
  (another copy of the step is running); Begin.KICK_NEXT: skip it, and kick
  the next step again as the record keeps it: the chain moved past this step
  a lease ago and no copy of the next step has begun (the advance landed and
  its kick did not: Redis went away in between for longer than the hook's
  retry_for, and this is the message coming back). It writes nothing, so
  that a guard retried, or a copy left unacknowledged because its kick failed,
  is told it again. No record (expired): Begin.RUN, since losing the work is
  worse than running it again.

  The first copy of a step to begin is told {Begin.RUN, waited, workflow}: ms
  from the record's last move (the previous step's end, or the chain's start)
  to now, and the chain's name, for its queue-wait metric; every later copy
  of the step (a renewal, a retry, a redelivery) is told Begin.RUN alone.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'state', 'step', 'run_step',
  'run_until', 'run_attempt', 'run_by', 'run_released', 'updated', 'workflow')
if not record[1] then
  return Begin.RUN
end
if record[1] ~= ARGV[1] or record[2] ~= 'running' then
  return Begin.SKIP
end
local now = now_ms()
if tonumber(record[3]) ~= tonumber(ARGV[2]) then
  if tonumber(record[3]) == tonumber(ARGV[2]) + 1 and record[4] ~= record[3]
      and now - (tonumber(record[9]) or 0) >= tonumber(ARGV[5]) then
    return Begin.KICK_NEXT
  end
  return Begin.SKIP
end
local attempt = tonumber(ARGV[3])
local at_step = record[4] == ARGV[2]  -- a copy of this step began: its lease
local recorded = at_step and (tonumber(record[6]) or 0) or 0
local mark = at_step and record[8] or ''
if at_step and released_by(record[7], ARGV[4], mark) then
  return Begin.RUNNING_ELSEWHERE  -- its renewal, landing after its release
end
if at_step and record[7] ~= ARGV[4] and not may_take_lease(attempt, recorded,
    (tonumber(record[5]) or 0) > now, ARGV[6], mark) then
  return Begin.RUNNING_ELSEWHERE
end
redis.call('HSET', KEYS[1], 'run_step', ARGV[2], 'run_until', now + tonumber(ARGV[5]),
  'run_attempt', math.max(attempt, recorded), 'run_by', ARGV[4],
  'run_released', lease_mark(attempt, recorded, mark))
if not at_step then
  return {Begin.RUN, now - (tonumber(record[9]) or now), record[10] or ''}
end
return Begin.RUN
