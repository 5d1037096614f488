--[[
  Everything the finaliser needs to build the GroupResult and pick the
  continuation, read in one step. A group over its inline_max goes by
  reference: only its counts are read (never every outcome), and its result
  keys' expiry is pushed to a ttl from now, for the continuation to read them.
  A small group's lost members (the sweep gave it up) are read with the rest.

  KEYS[1] meta      KEYS[2] done     KEYS[3] failed
  KEYS[4] results   KEYS[5] errors   KEYS[6] lost

  ARGV[1] token

  Returns {} when the group is missing or the token differs, else
  {{total, then, on_error, policy, state, span, skipped count}, by reference
   (1 | 0), done count, failed count, lost count, lost members, done members,
   failed members, results (flat field/value list),
   errors (flat field/value list)}: by reference, the five lists are empty.
  Skipped members are among the done ones (and in the done count), their
  reasons in the errors hash under 's<index>' (recordOutcome).
]]
local meta = redis.call('HMGET', KEYS[1],
  'token', 'total', 'then', 'on_error', 'policy', 'state', 'span',
  'done_count', 'failed_count', 'lost_count', 'inline_max', 'expires', 'ttl',
  'skipped_count')
if meta[1] ~= ARGV[1] then
  return {}
end
local head = {meta[2], meta[3], meta[4], meta[5], meta[6], meta[7], meta[14] or 0}
local done, failed, lost = tonumber(meta[8]) or 0, tonumber(meta[9]) or 0,
  tonumber(meta[10]) or 0
if by_reference(meta[2], meta[11]) then
  keep_for_reading(KEYS[1], {KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]},
    meta[12], meta[13])
  return {head, 1, done, failed, lost, {}, {}, {}, {}, {}}
end
return {
  head, 0, done, failed, lost,
  lost > 0 and redis.call('SMEMBERS', KEYS[6]) or {},
  redis.call('SMEMBERS', KEYS[2]),
  redis.call('SMEMBERS', KEYS[3]),
  redis.call('HGETALL', KEYS[4]),
  redis.call('HGETALL', KEYS[5]),
}
