--[[
  Put a group (or a chain) in a sweep index, due a duration from now on Redis's
  clock; or list the entries that are due now.

  KEYS[1] index     sorted set: id -> when the sweep should look (epoch ms)

  ARGV[1] mode      'nx': only a new entry; 'xx': only an existing one; 'set':
                    either; 'sooner': only an existing one due later; 'due':
                    list instead of writing
  ARGV[2] id        (due: how many at most)
  ARGV[3] after     ms from now (due: unused)

  Returns 1 when written, 0 when not (nx: it was there; xx: it was not;
  sooner: it was not, or was due sooner already); for
  'due', {now, id, id, ...} soonest first.
]]
local now = now_ms()
if ARGV[1] == 'due' then
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[2])
  table.insert(due, 1, now)
  return due
end
local at = now + tonumber(ARGV[3])
if ARGV[1] == 'set' then
  redis.call('ZADD', KEYS[1], at, ARGV[2])
  return 1
end
if ARGV[1] == 'sooner' then
  local score = redis.call('ZSCORE', KEYS[1], ARGV[2])
  if not score or tonumber(score) <= at then
    return 0
  end
  redis.call('ZADD', KEYS[1], at, ARGV[2])
  return 1
end
return redis.call('ZADD', KEYS[1], string.upper(ARGV[1]), 'CH', at, ARGV[2])
