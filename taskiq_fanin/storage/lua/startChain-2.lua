--[[
  Create a chain's workflow record before its first step is kicked. Starting the
  same chain id twice changes nothing.

  KEYS[1] record   hash: token, state, step, steps, names, started, updated,
                   finished, span, pending, error, failed_step, failure:<step>, redrives,
                   run_step, run_until, run_attempt, member, outcome, payload,
                   step_undo, version, workflow
  KEYS[2] meta     of a group of the same id: a group and a chain cannot share
                   an id (same hash tag, same slot)

  ARGV[1] token
  ARGV[2] steps    number of steps
  ARGV[3] names    JSON list of the steps' names
  ARGV[4] ttl      ms the record lives (renewed at every transition)
  ARGV[5] pending  the first step's kick (JSON), for the sweep to repeat if lost
  ARGV[6] span     ms a step may take before the chain counts as stuck (and a
                   step's run lease)
  ARGV[7] member   the label of the group member the chain is, or ''
  ARGV[8] version  the version it was started with, or ''
  ARGV[9] workflow its name (chain(..., name=...), else its first step's), or ''

  Returns Started.CREATED when created, or when this is its starter again (the
  same token: a caller retrying, its reply lost or its write not replicated)
  and the chain has not moved from its first step: kick it (twice is
  harmless); Started.EXISTS when the chain exists, Started.ID_IN_USE when a
  group holds the id (nothing is written).
]]
if redis.call('EXISTS', KEYS[1]) == 1 then
  local existing = redis.call('HMGET', KEYS[1], 'token', 'state', 'step')
  if existing[1] == ARGV[1] and existing[2] == 'running' and existing[3] == '0' then
    return Started.CREATED
  end
  return Started.EXISTS
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return Started.ID_IN_USE
end
local now = now_ms()
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'state', 'running', 'step', 0,
  'steps', ARGV[2], 'names', ARGV[3], 'started', now, 'updated', now,
  'pending', ARGV[5], 'span', ARGV[6], 'redrives', 0)
if ARGV[7] ~= '' then
  redis.call('HSET', KEYS[1], 'member', ARGV[7])
end
if ARGV[8] and ARGV[8] ~= '' then
  redis.call('HSET', KEYS[1], 'version', ARGV[8])
end
if ARGV[9] and ARGV[9] ~= '' then
  redis.call('HSET', KEYS[1], 'workflow', ARGV[9])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return Started.CREATED
