-- Write a message_chunk event: a piece of a message a worker's call is writing, while the
-- turn it was asked for is still open. Nothing is written for a room that is gone (a call
-- still out when its room was deleted must not bring back a key of it), nor once the turn
-- is decided (its message is committed, or it was abandoned).
-- KEYS[1] state   KEYS[2] events
-- ARGV[1] events stream cap   ARGV[2] turn   ARGV[3] phase   ARGV[4] agent   ARGV[5] index
-- ARGV[6] text
-- Returns 1 when the chunk was written, 0 when not (room gone, turn not open).
-- Fails, writing nothing, with BADARG (the cap, turn, phase or index not a count).
-- @include checks
-- @include events
for _, i in ipairs({1, 2, 3, 5}) do
  if count(ARGV[i]) == nil then
    return redis.error_reply('BADARG the cap, turn, phase and index must be counts')
  end
end
local state = redis.call('HMGET', KEYS[1], 'status', 'turn_open', 'turn', 'run')
if not state[1] or state[2] ~= '1' or state[3] ~= ARGV[2] then
  return 0
end

-- Every check is done: from here on, writes only.
add_event(KEYS[2], ARGV[1], {'type', 'message_chunk', 'turn', ARGV[2], 'run', state[4] or '0',
  'phase', ARGV[3], 'agent', ARGV[4], 'index', ARGV[5], 'text', ARGV[6]})
return 1
