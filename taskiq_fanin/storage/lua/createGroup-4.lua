--[[
  Plan a group: write its meta and the first chunk of its ledger, before any
  member is dispatched (invariant 1); appendLedger writes the further chunks.
  Planning the same group id twice changes nothing. Times are Redis's own: the
  deadline and the expiry are durations from now.

  KEYS[1] meta      KEYS[2] plan     KEYS[3] claim
  KEYS[4] the record of a chain of the same id: a group and a chain cannot
          share an id (same hash tag, same slot)

  ARGV[1] token             random per group; members carry it in their labels
  ARGV[2] planner lease     ms after which an unplanned group's planner is dead
                            (and the lease of an empty group's finaliser)
  ARGV[3] claimant          who plans: an empty group is complete at once, and
                            its planner claims it to run the continuation
  ARGV[4] options           how many name/value pairs follow: the group's options
                            as its meta keeps them (continuations, policies,
                            span: ms to the deadline, ttl: ms every key lives,
                            depth, cancellable; sealed: 0 when appendLedger
                            writes further chunks, 1 or absent when this call
                            is the whole ledger; digest: what the members
                            are, to tell a plan tried again from another)
  ARGV[5 .. 4 + 2 * options]        name, value, name, value, ...
  ARGV[5 + 2 * options]             count: number of members in this chunk
  ARGV[6 + 2 * options .. ]         member 0 .. count - 1, serialized

  The meta's total is always the number of members in the ledger; 'sealed'
  says no chunk may be added (no member is kicked before it is set).

  Returns {Created.CREATED, token, state} when created (state 'claimed' for an
  empty group: the caller finalises it); {Created.EXISTS, token, state} when the
  group exists; {Created.EXISTS_UNPLANNED, token, state} when it exists
  unplanned and either its planner died (it has not been planned a planner
  lease after its creation) or this is its planner again (the same token: a
  planner retrying), to write (if not sealed) and dispatch what it has not;
  {Created.ID_IN_USE, '', ''} when a chain holds the id: nothing is written;
  {Created.OTHER_PLAN, token, state} when the group exists with other members
  (its digest is not this plan's; a group made before digests were is never
  told apart): nothing is written.
  A fourth field says whether the ledger is sealed (1) or not (0).
]]
local now = now_ms()
local existing = redis.call('HMGET', KEYS[1],
  'token', 'planned', 'created', 'state', 'planner_at', 'sealed', 'digest')
if existing[1] then
  for i = 5, 4 + 2 * tonumber(ARGV[4]), 2 do
    if ARGV[i] == 'digest' and existing[7] and existing[7] ~= ARGV[i + 1] then
      return {Created.OTHER_PLAN, existing[1], existing[4], existing[6] or '1'}
    end
  end
  -- The planner's lease runs from its last chunk written (or the creation).
  local last = tonumber(existing[5] or existing[3])
  local sealed = existing[6] or '1'
  if existing[2] ~= '1' and (existing[1] == ARGV[1]
      or now - last > tonumber(ARGV[2])) then
    return {Created.EXISTS_UNPLANNED, existing[1], existing[4], sealed}
  end
  return {Created.EXISTS, existing[1], existing[4], sealed}
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  return {Created.ID_IN_USE, '', ''}
end

local options = tonumber(ARGV[4])
local total = tonumber(ARGV[5 + 2 * options])
local first_member = 6 + 2 * options
local sealed = 1
local span, ttl
for i = 5, 4 + 2 * options, 2 do
  if ARGV[i] == 'span' then span = tonumber(ARGV[i + 1]) end
  if ARGV[i] == 'ttl' then ttl = tonumber(ARGV[i + 1]) end
  if ARGV[i] == 'sealed' then sealed = tonumber(ARGV[i + 1]) end
end
redis.call('HSET', KEYS[1],
  'token', ARGV[1], 'state', 'open', 'created', now, 'deadline', now + span,
  'expires', now + ttl, 'total', total,
  'done_count', 0, 'failed_count', 0, 'planned', 0, 'redrives', 0,
  'sealed', sealed,
  unpack(ARGV, 5, 4 + 2 * options))

-- HSET in slices: unpack() of a very wide group would overflow Lua's C stack.
local slice = 500
for first = 0, total - 1, slice do
  local last = math.min(first + slice, total) - 1
  local fields = {}
  for index = first, last do
    fields[#fields + 1] = index
    fields[#fields + 1] = ARGV[first_member + index]
  end
  redis.call('HSET', KEYS[2], unpack(fields))
end

redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
if total == 0 and sealed == 1 then
  -- Nothing to wait for: complete now, and the planner finalises it.
  redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
  move(KEYS[1], 'group', 'open', 'claimed', 'claimed_at', now)
  return {Created.CREATED, ARGV[1], 'claimed', 1}
end
return {Created.CREATED, ARGV[1], 'open', sealed}
