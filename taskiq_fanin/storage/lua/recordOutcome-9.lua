--[[
  Record the terminal outcomes of one or more members of one group: the one
  round trip a completion costs (invariant 2), shared by the members of a group
  that finish together in one worker. Members are taken in order, each exactly
  as if recorded alone. Done and failed are exclusive and one-way; a second
  delivery of the same member changes nothing; the member whose outcome
  completes the group moves it from open to claimed (the state is the guard:
  one call can make that move) and takes the finaliser's lease. A member of a
  cancelled group (it was running when the cancel came) is counted just the
  same, with no payload kept, and moves nothing: the group stays cancelled, and
  its sets live as long as its meta.

  A call retried after its reply was lost (a timeout, a restart) finds its
  members recorded: the delivery that claimed is told so again (the lease names
  it), so the continuation is not left to the sweep. Another delivery of the
  same member is a duplicate.

  A windowed group (its meta's max_in_flight, K) had only its first K
  members kicked: each outcome newly recorded in it while it is open releases
  the next ledger index, K + (outcomes recorded) - 1, so that at most K
  members without an outcome are ever kicked (the cursor is the count: no
  race, none left behind when outcomes come together, twice, or as failures).
  The reply hands the caller the released member's ledger row, to kick before
  its message is acknowledged. What each outcome released is kept (window),
  so the same delivery asking again after a lost reply is told it again, and
  another delivery of the member (its first copy's worker may have died
  between this call and the kick) is told it once the release's lease (ARGV[2])
  ran out, unless the released member has an outcome by then; once it has,
  the entry goes (the window hash holds about 2 K fields, not one per member):
  '<member>' -> '<released> <when> <delivery>', and 'r<released>' -> member.
  A windowed group's deadline slides to a span after its latest outcome.
  An open group not sealed yet is never claimed here, whatever its outcomes:
  its seal (sealGroup) claims it if every member it holds has one by then;
  an index its window would release that the ledger does not hold yet is
  released by the batch that adds it (addMembers).

  Each outcome newly recorded in an open group is also appended to the
  group's outcome stream (the last key: fields i, o, n: the group's outcomes so
  far, this one included, and p, its payload when it has one of at most
  STREAM_PAYLOAD bytes, else c = 1: cut, read it from the group's result; the
  entry's id, on Redis's clock, is the readers' cursor), trimmed to
  about ARGV[4] entries (0: no stream), with the meta's expiry. A reader
  follows it as it grows (handle.outcomes()) and times it (progress()'s
  rate): no round trip of its own.

  KEYS[1] meta      KEYS[2] done     KEYS[3] failed  KEYS[4] results
  KEYS[5] errors    KEYS[6] claim    KEYS[7] plan    KEYS[8] window
  KEYS[9] outcomes

  ARGV[1] token     the group's token, from the members' labels
  ARGV[2] lease     ms the finaliser may take before the sweep takes over
  ARGV[3] claimant  who claims: the lease holds '<claimant>#<delivery>'
  ARGV[4] stream    the outcome stream's length, about (0: none kept)
  then per member, four arguments:
    index     the member's index in the ledger
    outcome   'done' | 'failed' | 'skipped'
    payload   result (done), error summary (failed) or reason (skipped) as
              JSON; '' for none

  A skipped member (its body raised Skip) counts toward the group as a done
  one does (in the done set and count, never in the failed ones), and is
  counted again in the meta's skipped_count; its reason goes in the errors
  hash under 's<index>', where no failure's field can be.
    delivery  this delivery of the member (random), the same when it retries

  Returns {codes, collected, outstanding}: a code per member, in order:
  Recorded.RECORDED; Recorded.CLAIMED: recorded and claimed, or claimed by this
  delivery before (call the finaliser); Recorded.DUPLICATE; Recorded.CONFLICT
  (the other outcome is already recorded); Recorded.NO_GROUP;
  Recorded.NOT_MEMBER; Recorded.TOKEN_MISMATCH; Recorded.FINALISED (the group
  is finalised already, or being given up); Recorded.COUNTED_CANCELLED (counted in a cancelled
  group: nothing more to do). With a Recorded.CLAIMED, collected holds the
  fields collectOutcomes returns (the claimant finalises without reading them
  again): for a group over its inline_max, counts only (and the result keys'
  expiry pushed to a ttl from now), never a read of every outcome; otherwise it
  is empty. outstanding: members of the group without an outcome. When a
  windowed group released members, a fourth field, per member in order: {}
  or {released index, its ledger row, the group's depth, cancellable}.
]]
local first, per = 5, 4
local members = (#ARGV - first + 1) / per
local codes = {}
local function all(code)
  for i = 1, members do codes[i] = code end
  return {codes, {}, 0}
end

local meta = redis.call('HMGET', KEYS[1],
  'token', 'state', 'total', 'expires', 'done_count', 'failed_count',
  'max_in_flight', 'depth', 'cancellable', 'span', 'ttl', 'sealed')
if not meta[1] then
  return all(Recorded.NO_GROUP)  -- a missing group is never treated as complete
end
if meta[1] ~= ARGV[1] then
  return all(Recorded.TOKEN_MISMATCH)
end
local total = tonumber(meta[3])
local state = meta[2]
-- An open group (planned with open=True) is complete only once sealed: until
-- then, every member of it having an outcome finalises nothing (sealGroup does).
local sealed = (meta[12] or '1') == '1'
local counts = {done = tonumber(meta[5]) or 0, failed = tonumber(meta[6]) or 0}
local sets = {done = KEYS[2], failed = KEYS[3], skipped = KEYS[2]}
local payloads = {done = KEYS[4], failed = KEYS[5], skipped = KEYS[5]}
local other = {done = 'failed', failed = 'done', skipped = 'failed'}
-- Which count an outcome is counted in, and its payload's field.
local counted = {done = 'done', failed = 'failed', skipped = 'done'}
local function field(outcome, index)
  if outcome == 'skipped' then return 's' .. index end
  return index
end
local function count(outcome)
  if outcome == 'skipped' then
    redis.call('HINCRBY', KEYS[1], 'skipped_count', 1)
  end
  local name = counted[outcome]
  counts[name] = redis.call('HINCRBY', KEYS[1], name .. '_count', 1)
  return counts[name]
end
local holder = nil
local window = tonumber(meta[7]) or 0
local stream_max = tonumber(ARGV[4])
local streamed = false

-- Append a new outcome to the group's stream, for its readers: a payload up
-- to this size (a stream of 10,000 results of 64 KiB would hold 640 MB).
local STREAM_PAYLOAD = 1024
-- n: the group's outcomes so far, this one included (a rate counts between two).
local function stream(index, outcome, payload)
  if stream_max <= 0 then return end
  local n = counts.done + counts.failed
  if #payload > STREAM_PAYLOAD then
    redis.call('XADD', KEYS[9], 'MAXLEN', '~', stream_max, '*',
      'i', index, 'o', outcome, 'n', n, 'c', 1)
  elseif payload ~= '' then
    redis.call('XADD', KEYS[9], 'MAXLEN', '~', stream_max, '*',
      'i', index, 'o', outcome, 'n', n, 'p', payload)
  else
    redis.call('XADD', KEYS[9], 'MAXLEN', '~', stream_max, '*',
      'i', index, 'o', outcome, 'n', n)
  end
  streamed = true
end
local kicks, kicking, now, moved = {}, false, nil, false

-- Hand the caller member j of the ledger to kick, for the i-th member of the call.
local function kick(i, j)
  kicks[i] = {j, redis.call('HGET', KEYS[7], j) or '', meta[8] or '1', meta[9] or '0'}
  kicking = true
end

-- A new outcome in an open windowed group: what released this member is of
-- no more use (it ran); release the next index, if any.
local function release(i, index, delivery)
  local by = redis.call('HGET', KEYS[8], 'r' .. index)
  if by then redis.call('HDEL', KEYS[8], by, 'r' .. index) end
  local j = window + counts.done + counts.failed - 1
  if j >= total then return end
  now = now or now_ms()
  redis.call('HSET', KEYS[8], index, j .. ' ' .. now .. ' ' .. delivery,
    'r' .. j, index)
  redis.call('PEXPIREAT', KEYS[8], meta[4])
  kick(i, j)
end

-- A windowed group runs for as long as its width takes: it is stuck when its
-- window has not moved for its span, so its deadline slides with each outcome
-- (and its keys, near their expiry, live a ttl more: it must outlive it).
local function slide()
  now = now or now_ms()
  local span = tonumber(meta[10])
  if not span then return end
  redis.call('HSET', KEYS[1], 'deadline', now + span)
  if now + 2 * span <= tonumber(meta[4]) then return end
  meta[4] = now + math.max(tonumber(meta[11]) or 0, 2 * span)
  redis.call('HSET', KEYS[1], 'expires', meta[4])
  for _, key in ipairs({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[7], KEYS[8],
      KEYS[9]}) do
    redis.call('PEXPIREAT', key, meta[4])
  end
end

-- Another delivery of a recorded member: what it released, if it may kick it.
local function release_again(i, index, delivery)
  local entry = redis.call('HGET', KEYS[8], index)
  if not entry then return end
  local j, at, by = string.match(entry, '^(%d+) (%d+) (.*)$')
  now = now or now_ms()
  if by ~= delivery then
    if now - tonumber(at) <= tonumber(ARGV[2]) then return end  -- being kicked
    if redis.call('SISMEMBER', KEYS[2], j) == 1
        or redis.call('SISMEMBER', KEYS[3], j) == 1 then
      return  -- it ran: it was kicked
    end
    -- This delivery kicks it again, under a new lease.
    redis.call('HSET', KEYS[8], index, j .. ' ' .. now .. ' ' .. delivery)
  end
  kick(i, tonumber(j))
end

for i = 1, members do
  local at = first + per * (i - 1)
  local index = tonumber(ARGV[at])
  local outcome, payload, delivery = ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  local lease_holder = ARGV[3] .. '#' .. delivery
  if index == nil or index < 0 or index >= total or index % 1 ~= 0
      or sets[outcome] == nil then
    codes[i] = Recorded.NOT_MEMBER
  elseif state == 'cancelled' then
    codes[i] = Recorded.COUNTED_CANCELLED
    if redis.call('SISMEMBER', sets[other[outcome]], index) == 1 then
      codes[i] = Recorded.CONFLICT
    elseif redis.call('SADD', sets[outcome], index) == 0 then
      codes[i] = Recorded.DUPLICATE
    else
      count(outcome)
      local tombstone = redis.call('PTTL', KEYS[1])
      if tombstone > 0 then redis.call('PEXPIRE', sets[outcome], tombstone) end
    end
  elseif state ~= 'open' then
    codes[i] = Recorded.FINALISED
    if state == 'claimed' then
      holder = holder or redis.call('GET', KEYS[6])
      if holder == lease_holder
          and redis.call('SISMEMBER', sets[outcome], index) == 1 then
        -- This delivery claimed before: its reply was lost.
        codes[i] = Recorded.CLAIMED
      end
    end
  elseif redis.call('SISMEMBER', sets[other[outcome]], index) == 1 then
    codes[i] = Recorded.CONFLICT
    if window > 0 then release_again(i, index, delivery) end
  elseif redis.call('SADD', sets[outcome], index) == 0 then
    codes[i] = Recorded.DUPLICATE
    if window > 0 then release_again(i, index, delivery) end
  else
    -- Counted at once: should a later call fail, sets and counts still agree.
    if count(outcome) == 1 then
      redis.call('PEXPIREAT', sets[outcome], meta[4])
    end
    if payload ~= '' then
      redis.call('HSET', payloads[outcome], field(outcome, index), payload)
      redis.call('PEXPIREAT', payloads[outcome], meta[4])
    end
    stream(index, outcome, payload)
    codes[i] = Recorded.RECORDED
    if sealed and counts.done + counts.failed >= total then
      -- The state is the guard; the key is only the finaliser's lease, set
      -- whatever a stale one from an earlier group of this id holds.
      holder = lease_holder
      redis.call('SET', KEYS[6], holder, 'PX', ARGV[2])
      move(KEYS[1], 'group', 'open', 'claimed', 'claimed_at', now_ms())
      state = 'claimed'
      codes[i] = Recorded.CLAIMED
      -- Every member has an outcome: nothing is left to release.
      if window > 0 then redis.call('UNLINK', KEYS[8]) end
    elseif window > 0 then
      release(i, index, delivery)
      moved = true
    end
  end
end
if moved and state == 'open' then slide() end
if streamed then redis.call('PEXPIREAT', KEYS[9], meta[4]) end

local collected = {}
local handed = false
for i = 1, members do handed = handed or codes[i] == Recorded.CLAIMED end
if handed then
  -- Claimed by an outcome, never given up: no member is lost.
  local more = redis.call('HMGET', KEYS[1], 'then', 'on_error', 'policy', 'span',
    'inline_max', 'ttl', 'skipped_count')
  local head = {meta[3], more[1], more[2], more[3], 'claimed', more[4], more[7] or 0}
  if by_reference(total, more[5]) then
    keep_for_reading(KEYS[1], {KEYS[2], KEYS[3], KEYS[4], KEYS[5]}, meta[4], more[6])
    collected = {head, 1, counts.done, counts.failed, 0, {}, {}, {}, {}, {}}
  else
    collected = {
      head, 0, counts.done, counts.failed, 0, {},
      redis.call('SMEMBERS', KEYS[2]),
      redis.call('SMEMBERS', KEYS[3]),
      redis.call('HGETALL', KEYS[4]),
      redis.call('HGETALL', KEYS[5]),
    }
  end
end
local outstanding = total - counts.done - counts.failed
if kicking then
  for i = 1, members do kicks[i] = kicks[i] or {} end
  return {codes, collected, outstanding, kicks}
end
return {codes, collected, outstanding}
