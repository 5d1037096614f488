--[[
  Prepended to every script when it is loaded (store/scripts.py): Redis's own
  clock, and the only state changes each record allows (MOVES, rendered from
  taskiq_fanin/model/states.py). A script asked for any other move fails before
  it writes anything more.
]]
local MOVES = __MOVES__

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function may_move(record, from, to)
  local allowed = MOVES[record][from]
  return allowed ~= nil and allowed[to] == true
end

-- Set the hash's state from `from` to `to` (and any more field/value pairs).
local function move(key, record, from, to, ...)
  if not may_move(record, from, to) then
    error('taskiq-fanin: a ' .. record .. ' may not move from ' .. tostring(from) ..
      ' to ' .. tostring(to))
  end
  redis.call('HSET', key, 'state', to, ...)
end

-- Whether the sweep gave the chain up at this very step (the step may have
-- been running then): a copy of that step that ends later undoes itself, as a
-- step that ends after a cancel does.
local function given_up_at(state, given_up_step, step)
  return (state == 'failing' or state == 'failed') and given_up_step
    and tonumber(given_up_step) == tonumber(step)
end
