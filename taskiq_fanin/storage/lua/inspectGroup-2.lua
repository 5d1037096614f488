--[[
  A group as the sweep judges it: its meta, whether the finaliser's lease is
  still held, and Redis's clock (every deadline in the meta is on it). O(1) in
  the group's size: which members are missing is read in bounded pages
  (GroupScripts.missing_members), never here.

  KEYS[1] meta      KEYS[2] claim

  Returns {} when the group is missing, else
  {meta (flat field/value list), lease held (0 | 1), now}.
]]
local meta = redis.call('HGETALL', KEYS[1])
if #meta == 0 then
  return {}
end
return {meta, redis.call('EXISTS', KEYS[2]), now_ms()}
