--[[
  Everything the finaliser needs to build the GroupResult and pick the
  continuation, read in one step.

  KEYS[1] meta      KEYS[2] done     KEYS[3] failed
  KEYS[4] results   KEYS[5] errors

  ARGV[1] token

  Returns {} when the group is missing or the token differs, else
  {total, then, on_error, policy, state, span, lost (comma-separated indexes),
   done members, failed members, results (flat field/value list),
   errors (flat field/value list)}.
]]
local meta = redis.call('HMGET', KEYS[1],
  'token', 'total', 'then', 'on_error', 'policy', 'state', 'span', 'lost')
if meta[1] ~= ARGV[1] then
  return {}
end
return {
  meta[2], meta[3], meta[4], meta[5], meta[6], meta[7], meta[8] or '',
  redis.call('SMEMBERS', KEYS[2]),
  redis.call('SMEMBERS', KEYS[3]),
  redis.call('HGETALL', KEYS[4]),
  redis.call('HGETALL', KEYS[5]),
}
