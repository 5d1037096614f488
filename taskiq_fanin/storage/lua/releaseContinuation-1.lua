--[[
  A continuation's attempt ended without completing it (it failed, and the retry
  middleware will run it again): give up its run lease so the retry may run,
  unless the retry has already taken the lease over (beginContinuation). The
  state stays running: only the lease is released, marked so: a copy of the
  same attempt begun since is a run of its own, which no later attempt takes
  over (beginContinuation). The retry is due to begin within the group's span
  of now, on Redis's clock (run_retry_by): until then the sweep does not count
  the continuation lost (checkContinuation), however long its body ran.

  KEYS[1] meta

  ARGV[1] token
  ARGV[2] attempt   the attempt that ended
  ARGV[3] delivery  the delivery of it that began (and holds the lease)

  Returns Applied.APPLIED when released, Applied.UNCHANGED when the group is
  missing, not this token's, not running, running a later attempt, or its
  lease held by another delivery or released already (may_release: a release
  applied again, its reply lost, frees no copy begun since).
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'state', 'run_attempt',
  'run_by', 'run_released', 'span')
if meta[1] ~= ARGV[1] or meta[2] ~= 'running'
    or not may_release(meta[4], ARGV[3], meta[3], ARGV[2], meta[5]) then
  return Applied.UNCHANGED
end
redis.call('HSET', KEYS[1], 'run_until', 0, 'run_released', RELEASED,
  'run_retry_by', now_ms() + (tonumber(meta[6]) or 0))
return Applied.APPLIED
