--[[
  An attempt of a chain's error continuation ended without an outcome (the
  retry middleware will run it again): give up its run lease so the retry may
  run, unless a later attempt has taken it over. It stays running; the lease
  is marked released: a copy of the same attempt begun since is a run of its
  own, which no later attempt takes over (beginOnError). The retry is
  due to begin within a span (the record's step span, else ARGV[3]) of now,
  on Redis's clock (on_error_retry_by): past it, the sweep counts it lost.

  KEYS[1] record

  ARGV[1] token
  ARGV[2] attempt   the attempt that ended
  ARGV[3] span      ms: a step's span, when the record keeps none
  ARGV[4] delivery  the delivery of it that began (and holds the lease)

  Returns Applied.APPLIED when released, Applied.UNCHANGED when the chain is
  missing, not this token's, its error continuation not running, running a
  later attempt, or its lease another delivery's or released already
  (may_release: a release applied again frees no copy begun since).
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'on_error_state',
  'on_error_attempt', 'span', 'on_error_by', 'on_error_released')
if record[1] ~= ARGV[1] or record[2] ~= 'running'
    or not may_release(record[5], ARGV[4], record[3], ARGV[2], record[6]) then
  return Applied.UNCHANGED
end
local span = tonumber(record[4]) or tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'on_error_until', 0, 'on_error_retry_by', now_ms() + span,
  'on_error_released', RELEASED)
return Applied.APPLIED
