-- Queue a post into a room's inbox. A post also gives a room that failed on its errors
-- its tries again (failed_takes 0).
-- KEYS[1] spec   KEYS[2] state   KEYS[3] inbox
-- ARGV[1] sender   ARGV[2] content   ARGV[3] ts (unix s)
-- ARGV[4] the poster's W3C traceparent, or '' (kept with the entry: a run it starts
-- continues its trace)
-- Returns {inbox id, 1 when the room is paused (no coordinator needs to wake) else 0}.
-- Fails, writing nothing, with NOROOM (never created, deleted, expired, or still being
-- imported): a post never brings back a key of a room that is gone; TASKROOM <parent> (a
-- task's room runs no turns: its conversation is its task's).
if redis.call('EXISTS', KEYS[1]) == 0 or not redis.call('HGET', KEYS[2], 'status') then
  return redis.error_reply('NOROOM no such room')
end
local parent = redis.call('HGET', KEYS[2], 'parent')
if parent then
  return redis.error_reply('TASKROOM ' .. parent)
end
local paused = 0
if redis.call('HGET', KEYS[2], 'paused') == '1' then
  paused = 1
end

-- Every check is done: from here on, writes only.
local entry = {'sender', ARGV[1], 'content', ARGV[2], 'ts', ARGV[3]}
if ARGV[4] and ARGV[4] ~= '' then
  table.insert(entry, 'traceparent')
  table.insert(entry, ARGV[4])
end
local id = redis.call('XADD', KEYS[3], '*', unpack(entry))
redis.call('HSET', KEYS[2], 'failed_takes', 0)
return {id, paused}
