--[[
  A group as the sweep judges it: its meta, whether the finaliser's lease is
  still held, the members in the ledger that are neither done nor failed, and
  Redis's clock (every deadline in the meta is on it).

  KEYS[1] meta      KEYS[2] plan     KEYS[3] done    KEYS[4] failed
  KEYS[5] claim

  Returns {} when the group is missing, else
  {meta (flat field/value list), lease held (0 | 1), missing member indexes, now}.
]]
local meta = redis.call('HGETALL', KEYS[1])
if #meta == 0 then
  return {}
end
local missing = {}
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'open' then
  local seen = {}
  for _, index in ipairs(redis.call('SMEMBERS', KEYS[3])) do seen[index] = true end
  for _, index in ipairs(redis.call('SMEMBERS', KEYS[4])) do seen[index] = true end
  for _, index in ipairs(redis.call('HKEYS', KEYS[2])) do
    if not seen[index] then missing[#missing + 1] = tonumber(index) end
  end
  table.sort(missing)
end
return {meta, redis.call('EXISTS', KEYS[5]), missing, now_ms()}
