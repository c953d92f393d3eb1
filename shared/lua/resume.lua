-- Resume a paused room where it was: its run (if one was in progress) goes on with the next
-- turn, and posts that waited in the inbox are moved to the log.
-- KEYS[1] state   KEYS[2] inbox
-- Returns {1 when the room was paused else 0, 1 when a coordinator is needed (a run in
-- progress, a turn open, or posts waiting) else 0}. The caller then makes the room due.
-- Fails, writing nothing, with NOROOM.
local state = redis.call('HMGET', KEYS[1], 'status', 'paused', 'turn_open')
if not state[1] then
  return redis.error_reply('NOROOM no such room')
end
local needed = 0
if state[1] == 'running' or state[3] == '1' or redis.call('XLEN', KEYS[2]) > 0 then
  needed = 1
end
if state[2] ~= '1' then
  return {0, needed}
end

-- Every check is done: from here on, writes only.
redis.call('HDEL', KEYS[1], 'paused', 'paused_at')
return {1, needed}
