--[[
  Release a lock only if we still hold it (it may have expired and been taken).

  KEYS[1] lock

  ARGV[1] holder    the value the lock was set to

  Returns Applied.APPLIED when released, Applied.UNCHANGED when someone else
  holds it or nobody does.
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return Applied.UNCHANGED
end
redis.call('DEL', KEYS[1])
return Applied.APPLIED
