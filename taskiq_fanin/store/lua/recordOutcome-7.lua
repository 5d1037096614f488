--[[
  Record the terminal outcomes of one or more members of one group: the one
  round trip a completion costs (invariant 2), shared by the members of a group
  that finish together in one worker. Members are taken in order, each exactly
  as if recorded alone. Done and failed are exclusive and one-way; a second
  delivery of the same member changes nothing; the member that completes the
  group claims the finaliser lease with SET NX, so exactly one caller dispatches
  the continuation.

  KEYS[1] meta      KEYS[2] plan     KEYS[3] done    KEYS[4] failed
  KEYS[5] results   KEYS[6] errors   KEYS[7] claim

  ARGV[1] token     the group's token, from the members' labels
  ARGV[2] now       epoch ms
  ARGV[3] lease     ms the finaliser may take before the sweep takes over
  ARGV[4] claimant  who claims (for inspection only)
  then per member, three arguments:
    index     the member's index in the ledger
    outcome   'done' | 'failed'
    payload   result (done) or error summary (failed) as JSON; '' for none

  Returns {codes, collected, outstanding}: a code per member, in order: 1 recorded,
  2 recorded and claimed (call the finaliser), 3 duplicate, 4 conflict (the
  other outcome is already recorded), 5 no such group, 6 not a member, 7 token
  mismatch, 8 group already finalised. With a 2, collected holds the fields
  collectOutcomes returns (the claimant finalises without reading them again);
  otherwise it is empty. outstanding: members of the group without an outcome.
]]
local members = (#ARGV - 4) / 3
local codes = {}
local function all(code)
  for i = 1, members do codes[i] = code end
  return {codes, {}, 0}
end

local meta = redis.call('HMGET', KEYS[1],
  'token', 'state', 'total', 'expires', 'done_count', 'failed_count')
if not meta[1] then
  return all(5)  -- a missing group is never treated as complete
end
if meta[1] ~= ARGV[1] then
  return all(7)
end
local total = tonumber(meta[3])
local state = meta[2]
local counts = {done = tonumber(meta[5]) or 0, failed = tonumber(meta[6]) or 0}
local sets = {done = KEYS[3], failed = KEYS[4]}
local payloads = {done = KEYS[5], failed = KEYS[6]}
local other = {done = 'failed', failed = 'done'}
local collected = {}

for i = 1, members do
  local index = tonumber(ARGV[2 + 3 * i])
  local outcome = ARGV[3 + 3 * i]
  local payload = ARGV[4 + 3 * i]
  if index == nil or index < 0 or index >= total or index % 1 ~= 0
      or sets[outcome] == nil then
    codes[i] = 6
  elseif state ~= 'open' then
    codes[i] = 8
  elseif redis.call('SISMEMBER', sets[other[outcome]], index) == 1 then
    codes[i] = 4
  elseif redis.call('SADD', sets[outcome], index) == 0 then
    codes[i] = 3
  else
    -- Counted at once: should a later call fail, sets and counts still agree.
    counts[outcome] = redis.call('HINCRBY', KEYS[1], outcome .. '_count', 1)
    if counts[outcome] == 1 then
      redis.call('PEXPIREAT', sets[outcome], meta[4])
    end
    if payload ~= '' then
      redis.call('HSET', payloads[outcome], index, payload)
      redis.call('PEXPIREAT', payloads[outcome], meta[4])
    end
    codes[i] = 1
    if counts.done + counts.failed >= total
        and redis.call('SET', KEYS[7], ARGV[4], 'NX', 'PX', ARGV[3]) then
      state = 'claimed'
      codes[i] = 2
    end
  end
end

if state == 'claimed' then
  redis.call('HSET', KEYS[1], 'state', 'claimed', 'claimed_at', ARGV[2])
  local more = redis.call('HMGET', KEYS[1], 'then', 'on_error', 'policy', 'span',
    'lost')
  collected = {
    meta[3], more[1], more[2], more[3], 'claimed', more[4], more[5] or '',
    redis.call('SMEMBERS', KEYS[3]),
    redis.call('SMEMBERS', KEYS[4]),
    redis.call('HGETALL', KEYS[5]),
    redis.call('HGETALL', KEYS[6]),
  }
end
return {codes, collected, total - counts.done - counts.failed}
