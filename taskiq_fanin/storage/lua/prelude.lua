--[[
  Prepended to every script when it is loaded (storage/scripts.py): Redis's own
  clock, the only state changes each record allows (MOVES, rendered from
  taskiq_fanin/domain/states.py), and the reply codes (rendered from the enums of
  taskiq_fanin/storage/replies.py). A script asked for any other move fails before
  it writes anything more; a script returns a code by its name (Recorded.CLAIMED),
  and a name that is no code fails the script rather than answer nil.
]]
local MOVES = __MOVES__

local function codes(name, members)
  return setmetatable(members, {__index = function(_, member)
    error('taskiq-fanin: ' .. name .. ' has no reply code ' .. tostring(member))
  end})
end
__CODES__

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function may_move(record, from, to)
  local allowed = MOVES[record][from]
  return allowed ~= nil and allowed[to] == true
end

-- A run lease's mark (each guard keeps it beside its lease): RELEASED once
-- its attempt ended for its retry (the release scripts), REBEGUN once a copy
-- of that same attempt began since (kicked again: a redelivery, a duplicate, a
-- group or the sweep re-kicking it), '' for the first copy of an attempt.
local RELEASED, REBEGUN = 'released', 'rebegun'

-- Whether a copy of `attempt` may take a run lease whose holder recorded
-- `recorded` (another delivery; `held`: its lease has not run out; `mark`:
-- the lease's). Attempt n exists only once a copy of n-1 ended, so an earlier
-- attempt's copy never runs; the next attempt takes even a held lease over
-- (the retry middleware kicks it before the failed attempt releases), unless
-- it is the sweep's copy (`takes_over` '0': it goes as the next attempt, but
-- nothing ended) or the holder is a copy begun again after its attempt's
-- release (REBEGUN: a run of its own, still running; taken over, both bodies
-- would run to their end); a copy of the same attempt, or a jump past the
-- next, only once it is not held.
local function may_take_lease(attempt, recorded, held, takes_over, mark)
  if attempt < recorded then
    return false
  end
  return not held
    or (attempt == recorded + 1 and takes_over ~= '0' and mark ~= REBEGUN)
end

-- Whether the delivery asking is the one whose attempt released the lease
-- (`by` its holder, `mark` its mark): its renewal landing after its release.
-- A delivery that released never runs nor renews again; its retry (or a copy
-- kicked again) may take the lease.
local function released_by(by, delivery, mark)
  return by == delivery and mark == RELEASED
end

-- Whether the holder `by` of a lease marked `mark` may release it as the
-- delivery `delivery` of the attempt `attempt` (`recorded` the lease's): only
-- the delivery that holds it, once. A release applied again (its reply lost)
-- frees no copy begun since, nor counts again.
local function may_release(by, delivery, recorded, attempt, mark)
  return by == delivery and (tonumber(recorded) or 0) == tonumber(attempt)
    and mark ~= RELEASED
end

-- The mark a copy of `attempt` leaves as it takes (or renews) a lease marked
-- `mark` whose holder recorded `recorded`: the released attempt again, or a
-- copy begun again renewing, is REBEGUN; a later attempt's first copy, ''.
local function lease_mark(attempt, recorded, mark)
  if attempt == recorded and (mark == RELEASED or mark == REBEGUN) then
    return REBEGUN
  end
  return ''
end

-- Set the hash's `field` from `from` to `to` (and any more field/value pairs):
-- the state of a record kept in a field of another's hash (a chain's error
-- continuation, in its chain's record).
local function move_field(key, record, field, from, to, ...)
  if not may_move(record, from, to) then
    error('taskiq-fanin: a ' .. record .. ' may not move from ' .. tostring(from) ..
      ' to ' .. tostring(to))
  end
  redis.call('HSET', key, field, to, ...)
end

-- Set the hash's state from `from` to `to` (and any more field/value pairs).
local function move(key, record, from, to, ...)
  move_field(key, record, 'state', from, to, ...)
end

-- Whether the sweep gave the chain up at this very step (the step may have
-- been running then): a copy of that step that ends later undoes itself, as a
-- step that ends after a cancel does.
local function given_up_at(state, given_up_step, step)
  return (state == 'failing' or state == 'failed') and given_up_step
    and tonumber(given_up_step) == tonumber(step)
end

-- A claimed group whose continuation reads its results by reference (it has
-- more members than its 'inline_max'): the result keys must outlive the
-- continuation, so their expiry goes to at least a whole ttl from now (the
-- continuation's completion then shrinks them to the tombstone).
local function by_reference(total, inline_max)
  local most = tonumber(inline_max)
  return most ~= nil and most > 0 and tonumber(total) > most
end

local function keep_for_reading(meta_key, keys, expires, ttl)
  if not ttl then return end
  local keep_until = now_ms() + tonumber(ttl)
  if keep_until <= (tonumber(expires) or 0) then return end
  redis.call('HSET', meta_key, 'expires', keep_until)
  redis.call('PEXPIREAT', meta_key, keep_until)
  for _, key in ipairs(keys) do redis.call('PEXPIREAT', key, keep_until) end
end
