--[[
  Put a group or a chain in its sweep index, due a duration from now on Redis's
  clock (listDue reads the entries due).

  KEYS[1] index     sorted set: id -> when the sweep should look (epoch ms)

  ARGV[1] mode      'nx': only a new entry; 'xx': only an existing one; 'set':
                    either; 'sooner': only an existing one due later
  ARGV[2] id
  ARGV[3] after     ms from now

  Returns Applied.APPLIED when written, Applied.UNCHANGED when not (nx: it was
  there; xx: it was not; sooner: it was not, or was due sooner already).
]]
local at = now_ms() + tonumber(ARGV[3])
if ARGV[1] == 'set' then
  redis.call('ZADD', KEYS[1], at, ARGV[2])
  return Applied.APPLIED
end
if ARGV[1] == 'sooner' then
  local score = redis.call('ZSCORE', KEYS[1], ARGV[2])
  if not score or tonumber(score) <= at then
    return Applied.UNCHANGED
  end
  redis.call('ZADD', KEYS[1], at, ARGV[2])
  return Applied.APPLIED
end
if redis.call('ZADD', KEYS[1], string.upper(ARGV[1]), 'CH', at, ARGV[2]) == 0 then
  return Applied.UNCHANGED
end
return Applied.APPLIED
