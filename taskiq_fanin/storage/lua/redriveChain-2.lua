--[[
  The sweep re-drives a stuck chain: count the re-drive, at most a bound of
  times, and renew the record's life (a re-driven chain must outlive its step).

  KEYS[1] record
  KEYS[2] comps

  ARGV[1] token
  ARGV[2] max re-drives
  ARGV[3] ttl      ms the record lives from now

  Returns {Applied.APPLIED, re-drives so far, pending kick} when re-driven now,
  {Applied.UNCHANGED, re-drives so far} when the chain is not running (missing,
  not this token's, over) or has used up its re-drives.
]]
local record = redis.call('HMGET', KEYS[1], 'token', 'state', 'redrives', 'pending')
local redrives = tonumber(record[3]) or 0
if record[1] ~= ARGV[1] or record[2] ~= 'running'
    or redrives >= tonumber(ARGV[2]) then
  return {Applied.UNCHANGED, redrives}
end
redrives = redis.call('HINCRBY', KEYS[1], 'redrives', 1)
redis.call('HSET', KEYS[1], 'updated', now_ms())
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {Applied.APPLIED, redrives, record[4] or ''}
