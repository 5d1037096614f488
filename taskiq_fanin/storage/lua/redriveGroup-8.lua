--[[
  Re-drive a window of an open group's ledger: the sweep kicks again the
  members of ledger indexes [from, to) that are neither done nor failed (read
  in bounded pages beside this call). A pass over the ledger starts at 0 and
  goes on window by window, one window per sweep visit, so that no visit's
  work grows with the group. A pass's first window records the re-drive,
  seals the ledger (a planner still writing it is refused: what the ledger
  holds is the group; a group planned open stays open to add() until its
  caller seals it) and pushes the deadline (and, if need be, the keys'
  expiry) out; 'redrive_next' says where the pass goes on, until it is over.
  Of a windowed group (max_in_flight), only the released indexes are a pass's
  (max_in_flight past the outcomes recorded, as recordOutcome releases them):
  kicking one not released yet would let more than max_in_flight run.

  KEYS[1] meta      KEYS[2] plan     KEYS[3] done    KEYS[4] failed
  KEYS[5] results   KEYS[6] errors   KEYS[7] window   KEYS[8] outcomes
  (each one's expiry pushed past the deadline: a windowed group's window too,
  or a redelivered member could no longer kick again what it released)

  ARGV[1] token
  ARGV[2] max re-drives  a group is re-driven at most this many times
  ARGV[3] from           the window's first index: 0, or where the pass is
  ARGV[4] to             past its last index

  Returns {Applied.APPLIED, re-drives so far, 1 if the pass is over else 0}
  when the window may be kicked, {Applied.UNCHANGED, re-drives so far, 0} when
  the group is not open (or missing, or not this token's), has used up its
  re-drives, or its pass is elsewhere than ``from``.
]]
local meta = redis.call('HMGET', KEYS[1],
  'token', 'state', 'redrives', 'span', 'expires', 'redrive_next', 'total',
  'max_in_flight', 'done_count', 'failed_count', 'open')
if meta[1] ~= ARGV[1] or meta[2] ~= 'open' then
  return {Applied.UNCHANGED, tonumber(meta[3]) or 0, 0}
end
local redrives = tonumber(meta[3])
local from, to = tonumber(ARGV[3]), tonumber(ARGV[4])
if from ~= (tonumber(meta[6]) or 0) then
  return {Applied.UNCHANGED, redrives, 0}
end
if from == 0 then
  if redrives >= tonumber(ARGV[2]) then
    return {Applied.UNCHANGED, redrives, 0}
  end
  local now = now_ms()
  redrives = redis.call('HINCRBY', KEYS[1], 'redrives', 1)
  local deadline = now + tonumber(meta[4])
  redis.call('HSET', KEYS[1], 'redriven_at', now, 'deadline', deadline)
  -- A group planned open is sealed by its caller (or a give-up), never here.
  if meta[11] ~= '1' then redis.call('HSET', KEYS[1], 'sealed', 1) end
  -- The group must outlive its new deadline: push every key's expiry past it.
  local expires = math.max(tonumber(meta[5]), deadline + tonumber(meta[4]))
  if expires > tonumber(meta[5]) then
    redis.call('HSET', KEYS[1], 'expires', expires)
    for _, key in ipairs(KEYS) do
      redis.call('PEXPIREAT', key, expires)
    end
  end
end
local last = tonumber(meta[7])
local window = tonumber(meta[8]) or 0
if window > 0 then
  last = math.min(last, window + tonumber(meta[9]) + tonumber(meta[10]))
end
if to >= last then
  redis.call('HDEL', KEYS[1], 'redrive_next')
  return {Applied.APPLIED, redrives, 1}
end
redis.call('HSET', KEYS[1], 'redrive_next', to)
return {Applied.APPLIED, redrives, 0}
