--[[
  Give up on an open group, a window of its ledger a call: the members that
  never got an outcome are noted lost, then the finaliser is claimed so the
  continuation runs with what arrived. No call's work grows with the group.

  The first window (from 0) moves the group from open to giving_up and seals
  its ledger: from then on no outcome is recorded (recordOutcome answers
  Recorded.FINALISED, as for a claimed group), no chunk appended, no re-drive
  or cancel taken, so the done and failed sets the windows read no longer
  change and no member is both recorded and lost; nor is any member released
  any more: a windowed group's window hash goes (it would otherwise outlive
  the group's end, to its expiry). Each window adds the indexes
  of [from, to) neither done nor failed to the lost set and counts them in
  'lost_count'; 'lost_next' says where the pass goes on. The ledger holds
  indexes 0 .. total - 1 (its chunks are written in order; its total is what it
  holds), the membership recordOutcome checks: no read of the ledger itself,
  which halves a window's time (about 1 ms for 1,000 indexes). The
  window that reaches the ledger's end moves the group to claimed (the state
  is the guard: one call makes that move) and takes the finaliser's lease.
  A window asked for anywhere but where the pass is (a second sweep racing
  the first) changes nothing.

  KEYS[1] meta      KEYS[2] done     KEYS[3] failed  KEYS[4] lost
  KEYS[5] claim     KEYS[6] window

  ARGV[1] token
  ARGV[2] from      the window's first index: 0 to begin, else 'lost_next'
  ARGV[3] to        past its last index
  ARGV[4] lease     ms the finaliser may take before the next sweep takes over
  ARGV[5] claimant  the lease's holder

  Returns {Applied.APPLIED, lost so far, next}: next is where the pass goes
  on, or -1 when this window claimed (the caller finalises);
  {Applied.UNCHANGED, lost so far, next} when the group is missing, not this
  token's, neither open nor giving_up (next -1), or its pass is elsewhere than
  from (next: where it is).
]]
local meta = redis.call('HMGET', KEYS[1],
  'token', 'state', 'total', 'lost_next', 'lost_count', 'expires')
if meta[1] ~= ARGV[1] then
  return {Applied.UNCHANGED, 0, -1}
end
local from, to = tonumber(ARGV[2]), tonumber(ARGV[3])
local lost = tonumber(meta[5]) or 0
local now = now_ms()
if meta[2] == 'open' then
  if from ~= 0 then
    return {Applied.UNCHANGED, lost, 0}
  end
  move(KEYS[1], 'group', 'open', 'giving_up', 'given_up_at', now, 'sealed', 1,
    'lost_count', 0, 'lost_next', 0)
  redis.call('UNLINK', KEYS[6])
  lost = 0
elseif meta[2] ~= 'giving_up' then
  return {Applied.UNCHANGED, lost, -1}
elseif from ~= tonumber(meta[4]) then
  return {Applied.UNCHANGED, lost, tonumber(meta[4])}
end

local total = tonumber(meta[3])
to = math.min(to, total)
-- In slices: unpack() of a very wide window would overflow Lua's C stack.
local slice = 500
for first = from, to - 1, slice do
  local indexes = {}
  for index = first, math.min(first + slice, to) - 1 do
    indexes[#indexes + 1] = index
  end
  local done = redis.call('SMISMEMBER', KEYS[2], unpack(indexes))
  local failed = redis.call('SMISMEMBER', KEYS[3], unpack(indexes))
  local found = {}
  for i, index in ipairs(indexes) do
    if done[i] == 0 and failed[i] == 0 then found[#found + 1] = index end
  end
  if #found > 0 then
    redis.call('SADD', KEYS[4], unpack(found))
    redis.call('PEXPIREAT', KEYS[4], meta[6])
    lost = redis.call('HINCRBY', KEYS[1], 'lost_count', #found)
  end
end

if to < total then
  redis.call('HSET', KEYS[1], 'lost_next', to)
  return {Applied.APPLIED, lost, to}
end
-- The state is the guard; the key is only the finaliser's lease.
redis.call('SET', KEYS[5], ARGV[5], 'PX', ARGV[4])
redis.call('HDEL', KEYS[1], 'lost_next')
move(KEYS[1], 'group', 'giving_up', 'claimed', 'claimed_at', now)
return {Applied.APPLIED, lost, -1}
