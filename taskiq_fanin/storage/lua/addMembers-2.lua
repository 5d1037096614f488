--[[
  Add a batch of members to an open group (planned with open=True, not sealed
  yet): written to its ledger after the members it holds, before the caller
  kicks any of them (invariant 1, per batch). Indexes follow the order of
  addition. The same batch sent again (its reply was lost) is told where it
  went and writes nothing more: its mark in the ledger, 'a:<batch>', says.

  KEYS[1] meta      KEYS[2] plan

  ARGV[1] batch     random per add() call, the same when it is retried
  ARGV[2] most      max_group_size: the total may not pass it
  ARGV[3 ..]        the batch's members, serialized

  Returns {Added.ADDED, token, first, total, released, depth, cancellable}:
  the batch holds indexes first .. first + #members - 1; the caller kicks
  those below released (a windowed group's window reaches max_in_flight past
  its outcomes; the rest are released by the outcomes to come, as
  recordOutcome releases them). The same for a batch added before.
  {Added.NO_GROUP}; {Added.SEALED, state} when it takes no more members (its
  ledger is sealed, it was planned without open=True, or it is not open:
  cancelled, given up, over); {Added.TOO_WIDE, total} past max_group_size.
  Nothing is written but by Added.ADDED.
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'state', 'open', 'sealed',
  'total', 'max_in_flight', 'done_count', 'failed_count', 'depth', 'cancellable',
  'expires')
if not meta[1] then
  return {Added.NO_GROUP}
end
local total = tonumber(meta[5])
local window = tonumber(meta[6]) or 0
local outcomes = (tonumber(meta[7]) or 0) + (tonumber(meta[8]) or 0)
local function reply(first, now_total)
  local released = now_total
  if window > 0 then released = math.min(now_total, window + outcomes) end
  return {Added.ADDED, meta[1], first, now_total, released, meta[9] or '1',
    meta[10] or '0'}
end
local mark = 'a:' .. ARGV[1]
local before = redis.call('HGET', KEYS[2], mark)
if before then
  return reply(tonumber(before), total)
end
if meta[2] ~= 'open' or meta[3] ~= '1' or (meta[4] or '1') == '1' then
  return {Added.SEALED, meta[2]}
end
local count = #ARGV - 2
if total + count > tonumber(ARGV[2]) then
  return {Added.TOO_WIDE, total}
end
-- HSET in slices: unpack() of a very wide batch would overflow Lua's C stack.
local slice = 500
for start = 3, #ARGV, slice do
  local fields = {}
  for arg = start, math.min(start + slice - 1, #ARGV) do
    fields[#fields + 1] = total + arg - 3
    fields[#fields + 1] = ARGV[arg]
  end
  redis.call('HSET', KEYS[2], unpack(fields))
end
redis.call('HSET', KEYS[2], mark, total)
redis.call('PEXPIREAT', KEYS[2], meta[11])
redis.call('HSET', KEYS[1], 'total', total + count)
return reply(total, total + count)
