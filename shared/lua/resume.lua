-- Resume a paused room where it was: its run (if one was in progress) goes on with the next
-- turn, and posts that waited in the inbox are moved to the log.
-- A resume writes a room_resumed event (run, status: the run's, waiting: posts in the
-- inbox).
-- KEYS[1] state   KEYS[2] inbox   KEYS[3] events
-- ARGV[1] events stream cap
-- Returns {1 when the room was paused else 0, 1 when a coordinator is needed (a run in
-- progress, a turn open, or posts waiting) else 0}. The caller then makes the room due.
-- Fails, writing nothing, with NOROOM or BADARG (the cap is not a count).
-- @include checks
-- @include events
local state = redis.call('HMGET', KEYS[1], 'status', 'paused', 'turn_open', 'run')
if not state[1] then
  return redis.error_reply('NOROOM no such room')
end
if not count(ARGV[1]) then
  return redis.error_reply(BAD_EVENTS_CAP)
end
local waiting = redis.call('XLEN', KEYS[2])
local needed = 0
if state[1] == 'running' or state[3] == '1' or waiting > 0 then
  needed = 1
end
if state[2] ~= '1' then
  return {0, needed}
end

-- Every check is done: from here on, writes only.
redis.call('HDEL', KEYS[1], 'paused', 'paused_at')
add_event(KEYS[3], ARGV[1], {'type', 'room_resumed', 'run', state[4] or '0', 'status', state[1],
  'waiting', waiting})
return {1, needed}
