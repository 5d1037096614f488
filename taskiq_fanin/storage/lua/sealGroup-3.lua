--[[
  Seal an open group (planned with open=True): its total is fixed, no member
  is added after. Every member it holds having an outcome already, the group
  is complete: it moves to claimed here (the state is the guard) and the
  caller, holding the finaliser's lease, enqueues the continuation. Sealing
  again changes nothing (a call retried after its reply was lost is told the
  same, with the lease it holds if it claimed).

  KEYS[1] meta      KEYS[2] claim    KEYS[3] window (a windowed group's: it
                                      releases nothing more once complete)

  ARGV[1] lease     ms the finaliser may take before the sweep takes over
  ARGV[2] claimant  the lease's holder

  Returns {Sealed.SEALED, token, total}: sealed now, members still to end;
  {Sealed.CLAIMED, token, total}: sealed and complete, the caller finalises
  (also to this claimant again while its lease holds); {Sealed.ALREADY, token,
  total, state}: sealed before (or planned without open=True: sealed at
  planning); {Sealed.NOT_OPEN, token, total, state}: cancelled or given up
  before a seal; {Sealed.NO_GROUP}.
]]
local meta = redis.call('HMGET', KEYS[1], 'token', 'state', 'open', 'sealed',
  'total', 'done_count', 'failed_count')
if not meta[1] then
  return {Sealed.NO_GROUP}
end
local total = tonumber(meta[5])
if meta[3] ~= '1' or (meta[4] or '1') == '1' then
  if meta[2] == 'claimed' and redis.call('GET', KEYS[2]) == ARGV[2] then
    return {Sealed.CLAIMED, meta[1], total}
  end
  return {Sealed.ALREADY, meta[1], total, meta[2]}
end
if meta[2] ~= 'open' then
  return {Sealed.NOT_OPEN, meta[1], total, meta[2]}
end
local now = now_ms()
redis.call('HSET', KEYS[1], 'sealed', 1, 'sealed_at', now)
if (tonumber(meta[6]) or 0) + (tonumber(meta[7]) or 0) >= total then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[1])
  move(KEYS[1], 'group', 'open', 'claimed', 'claimed_at', now)
  redis.call('UNLINK', KEYS[3])
  return {Sealed.CLAIMED, meta[1], total}
end
return {Sealed.SEALED, meta[1], total}
