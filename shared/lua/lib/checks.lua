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
-- A finite number (not NaN, not an infinity) as a number; nil for anything else (Lua's
-- tonumber also reads 'inf' and 'nan').
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
-- The limit of the counts a script moves on: epoch, last_seq, run, turn, run_turns,
-- messages_in_run, and the token and cost totals.
-- Each stays below COUNT_LIMIT, 10^14 (shared/records.py's COUNT_LIMIT): Lua joins a
-- number into a string with 14 significant digits, so a count past it would be written
-- rounded or as "1e+14" (in a stream id, a lease token), and HINCRBY fails at 2^63 - 1
-- with a bare error. A script refuses with OVERFLOW before its first write instead.
local COUNT_LIMIT = 1e14
-- The OVERFLOW refusal when `step` more on `value` (a state field's value, false when
-- absent) would reach COUNT_LIMIT, else nil.
local function overflow(name, value, step)
  if (tonumber(value) or 0) + step >= COUNT_LIMIT then
    return redis.error_reply('OVERFLOW ' .. name .. ' ' .. tostring(value or 0) .. ' + ' .. step
      .. ' would reach the limit of 10^14')
  end
  return nil
end
