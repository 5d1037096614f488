--[[
  Record one member's terminal outcome: the one round trip a completion costs
  (invariant 2). Done and failed are exclusive and one-way; a second delivery of
  the same member changes nothing; the member that completes the group claims the
  finaliser lease with SET NX, so exactly one caller dispatches the continuation.

  KEYS[1] meta      KEYS[2] plan     KEYS[3] done    KEYS[4] failed
  KEYS[5] results   KEYS[6] errors   KEYS[7] claim

  ARGV[1] token     the group's token, from the member's labels
  ARGV[2] index     the member's index in the ledger
  ARGV[3] outcome   'done' | 'failed'
  ARGV[4] payload   result (done) or error summary (failed) as JSON; '' for none
  ARGV[5] now       epoch ms
  ARGV[6] lease     ms the finaliser may take before the sweep takes over
  ARGV[7] claimant  who claims (for inspection only)

  Returns {code}: 1 recorded, 2 recorded and claimed (call the finaliser),
  3 duplicate, 4 conflict (the other outcome is already recorded), 5 no such
  group, 6 not a member, 7 token mismatch, 8 group already finalised. With 2
  come, after the code, the fields collectOutcomes returns: the claimant
  finalises without reading them again.
]]
local meta = redis.call('HMGET', KEYS[1],
  'token', 'state', 'total', 'expires', 'done_count', 'failed_count')
if not meta[1] then
  return {5}  -- a missing group is never treated as complete
end
if meta[1] ~= ARGV[1] then
  return {7}
end
local index = tonumber(ARGV[2])
local total = tonumber(meta[3])
if index == nil or index < 0 or index >= total or index % 1 ~= 0 then
  return {6}
end
if meta[2] ~= 'open' then
  return {8}
end

local own, other, own_count, other_count, payloads
if ARGV[3] == 'done' then
  own, other, own_count, other_count, payloads = KEYS[3], KEYS[4], 'done_count', meta[6], KEYS[5]
else
  own, other, own_count, other_count, payloads = KEYS[4], KEYS[3], 'failed_count', meta[5], KEYS[6]
end

if redis.call('SISMEMBER', other, index) == 1 then
  return {4}
end
if redis.call('SADD', own, index) == 0 then
  return {3}
end
local count = redis.call('HINCRBY', KEYS[1], own_count, 1)
if count == 1 then
  redis.call('PEXPIREAT', own, meta[4])
end
if ARGV[4] ~= '' then
  redis.call('HSET', payloads, index, ARGV[4])
  redis.call('PEXPIREAT', payloads, meta[4])
end

if count + tonumber(other_count) < total then
  return {1}
end
if not redis.call('SET', KEYS[7], ARGV[7], 'NX', 'PX', ARGV[6]) then
  return {1}
end
redis.call('HSET', KEYS[1], 'state', 'claimed', 'claimed_at', ARGV[5])
local more = redis.call('HMGET', KEYS[1], 'then', 'on_error', 'policy', 'span', 'lost')
return {
  2, meta[3], more[1], more[2], more[3], 'claimed', more[4], more[5] or '',
  redis.call('SMEMBERS', KEYS[3]),
  redis.call('SMEMBERS', KEYS[4]),
  redis.call('HGETALL', KEYS[5]),
  redis.call('HGETALL', KEYS[6]),
}
