--[[
  Release a lock only if we still hold it (it may have expired and been taken).

  KEYS[1] lock

  ARGV[1] holder    the value the lock was set to

  Returns 1 when released, 0 when someone else holds it or nobody does.
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
