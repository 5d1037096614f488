--[[
  Re-drive an open group: record the re-drive, push its deadline (and, if need
  be, its keys' expiry) out, and hand back exactly the ledger entries of the
  members that are neither done nor failed.

  KEYS[1] meta      KEYS[2] plan     KEYS[3] done    KEYS[4] failed
  KEYS[5] results   KEYS[6] errors   (each one's expiry pushed past the deadline)

  ARGV[1] token
  ARGV[2] max re-drives  a group is re-driven at most this many times

  Returns {Applied.APPLIED, re-drives so far, index, entry, index, entry, ...}
  when re-driven, {Applied.UNCHANGED, re-drives so far} when the group is not
  open (or missing, or not this token's) or has used up its re-drives.
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'state', 'redrives', 'span', 'expires')
if meta[1] ~= ARGV[1] or meta[2] ~= 'open' then
  return {Applied.UNCHANGED, tonumber(meta[3]) or 0}
end
local redrives = tonumber(meta[3])
if redrives >= tonumber(ARGV[2]) then
  return {Applied.UNCHANGED, redrives}
end
local now = now_ms()
redrives = redis.call('HINCRBY', KEYS[1], 'redrives', 1)
local deadline = now + tonumber(meta[4])
redis.call('HSET', KEYS[1], 'redriven_at', now, 'deadline', deadline)
-- The group must outlive its new deadline: push every key's expiry past it.
local expires = math.max(tonumber(meta[5]), deadline + tonumber(meta[4]))
if expires > tonumber(meta[5]) then
  redis.call('HSET', KEYS[1], 'expires', expires)
  for _, key in ipairs(KEYS) do
    redis.call('PEXPIREAT', key, expires)
  end
end

local seen = {}
for _, index in ipairs(redis.call('SMEMBERS', KEYS[3])) do seen[index] = true end
for _, index in ipairs(redis.call('SMEMBERS', KEYS[4])) do seen[index] = true end
local reply = {Applied.APPLIED, redrives}
for _, index in ipairs(redis.call('HKEYS', KEYS[2])) do
  if not seen[index] then
    reply[#reply + 1] = index
    reply[#reply + 1] = redis.call('HGET', KEYS[2], index)
  end
end
return reply
