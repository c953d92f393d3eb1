-- The limit of the counts a script moves on: epoch, last_seq, run, turn, run_turns,
-- messages_in_run, and the token and cost totals. Included by every script that
-- increments one.
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
