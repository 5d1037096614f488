--[[
  A chain as the sweep judges it: its record and Redis's clock (the record's
  times are on it).

  KEYS[1] record

  Returns {} when the chain is missing, else {record (flat field/value list), now}.
]]
local record = redis.call('HGETALL', KEYS[1])
if #record == 0 then
  return {}
end
return {record, now_ms()}
