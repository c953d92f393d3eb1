-- finite(value): the number a script argument or stored field holds, or nil when it is not
-- a finite number (Lua's tonumber also reads 'inf' and 'nan'). Included by commit.lua,
-- open_turn.lua and write_bids.lua.
local function finite(value)
  local number = tonumber(value)
  if number == nil or number ~= number or number == math.huge or number == -math.huge then
    return nil
  end
  return number
end
