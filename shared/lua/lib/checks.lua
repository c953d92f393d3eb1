-- The checks scripts make of their arguments and of the state they read, before their
-- first write.
-- A count (a string of at most 15 digits: a Lua number holds it exactly) as a number;
-- nil for anything else.
local function count(value)
  if type(value) ~= 'string' or #value > 15 or not string.match(value, '^%d+$') then
    return nil
  end
  return tonumber(value)
end
-- A finite number (not NaN, not an infinity) as a number; nil for anything else.
local function finite(value)
  local number = tonumber(value)
  if number == nil or number ~= number or number == math.huge or number == -math.huge then
    return nil
  end
  return number
end
-- The refusal of an events stream cap (an argument of every script that writes events)
-- that is not a count.
local BAD_EVENTS_CAP = 'BADARG the events stream cap must be a count'
