--[[
  The entries of a sweep index that are due now, on Redis's clock, soonest
  first (scheduleSweep writes them).

  KEYS[1] index     sorted set: id -> when the sweep should look (epoch ms)

  ARGV[1] batch     how many at most

  Returns {now, id, id, ...}.
]]
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[1])
table.insert(due, 1, now)
return due
