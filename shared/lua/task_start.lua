-- Start a background task for an agent (seed 003, "Talking and working: tasks"): record it
-- queued, for the room's coordinator to send to its worker's queue, and write its
-- task_started event. Starting the same id again changes nothing (the agent's tool asked
-- again after a takeover starts one task).
-- KEYS[1] spec   KEYS[2] state   KEYS[3] tasks   KEYS[4] task ids   KEYS[5] events
-- ARGV[1] task id   ARGV[2] agent   ARGV[3] worker   ARGV[4] hand_back (relay, post)
-- ARGV[5] instruction   ARGV[6] by (who started it)   ARGV[7] now (unix s)
-- ARGV[8] max_s   ARGV[9] events stream cap   ARGV[10] relay_as: 'instruct' when the
-- result is relayed as an instruction to the agent (a room that takes them), 'turn' when
-- it is relayed in a turn the coordinator gives the agent at the next turn boundary (other
-- rooms), else 'post' (posted as the agent's message once the turn under way ends)
-- Returns 1 when started, 0 when the id was started before.
-- Fails, writing nothing, with NOROOM (no such room), TASKROOM <parent> (the room is a
-- task's own: a worker starts no task of its own) or BADARG.
-- @include checks
-- @include events
if redis.call('EXISTS', KEYS[1]) == 0 or not redis.call('HGET', KEYS[2], 'status') then
  return redis.error_reply('NOROOM no such room')
end
local parent = redis.call('HGET', KEYS[2], 'parent')
if parent then
  return redis.error_reply('TASKROOM ' .. parent)
end
local id = ARGV[1]
if not string.match(id, '^%x+$') then
  return redis.error_reply('BADARG a task id is hex digits')
end
if ARGV[4] ~= 'relay' and ARGV[4] ~= 'post' then
  return redis.error_reply('BADARG hand_back must be relay or post')
end
local now, max_s = finite(ARGV[7]), finite(ARGV[8])
if not now or not max_s or max_s <= 0 then
  return redis.error_reply('BADARG now and max_s must be numbers, max_s above 0')
end
if not count(ARGV[9]) then
  return redis.error_reply(BAD_EVENTS_CAP)
end
if ARGV[10] ~= 'instruct' and ARGV[10] ~= 'turn' and ARGV[10] ~= 'post' then
  return redis.error_reply('BADARG relay_as must be instruct, turn or post')
end
if redis.call('HEXISTS', KEYS[3], id .. ':status') == 1 then
  return 0
end

-- Every check is done: from here on, writes only.
-- A scripted worker's k-th task replays its k-th script entry.
local number = redis.call('HINCRBY', KEYS[3], 'worker:' .. ARGV[3] .. ':tasks', 1)
redis.call('HSET', KEYS[3], id .. ':agent', ARGV[2], id .. ':worker', ARGV[3],
  id .. ':hand_back', ARGV[4], id .. ':instruction', ARGV[5], id .. ':by', ARGV[6],
  id .. ':status', 'queued', id .. ':started_at', ARGV[7], id .. ':beat_at', ARGV[7],
  id .. ':deadline', string.format('%.6f', now + max_s), id .. ':number', number,
  id .. ':sent', 0, id .. ':cancel', 0, id .. ':relay_as', ARGV[10])
redis.call('ZADD', KEYS[4], math.floor(now * 1000), id)
-- The room's count of tasks ever started: its coordinator reads tasks only when there are.
redis.call('HINCRBY', KEYS[2], 'tasks', 1)
add_event(KEYS[5], ARGV[9], {'type', 'task_started', 'task_id', id, 'agent', ARGV[2],
  'worker', ARGV[3], 'hand_back', ARGV[4], 'by', ARGV[6]})
return 1
