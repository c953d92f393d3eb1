-- A running task's heartbeat, from its worker's loop, with how it goes when the worker says
-- (a task_progress event, written only when the progress changed). The reply tells the
-- loop whether to go on.
-- KEYS[1] tasks   KEYS[2] events
-- ARGV[1] task id   ARGV[2] now (unix s)   ARGV[3] progress text ('' for none)
-- ARGV[4] events stream cap
-- Returns {1 when the task still runs else 0, 1 when it was asked to cancel else 0}.
-- @include checks
-- @include events
if not count(ARGV[4]) then
  return redis.error_reply(BAD_EVENTS_CAP)
end
local id = ARGV[1]
local held = redis.call('HMGET', KEYS[1], id .. ':status', id .. ':cancel', id .. ':agent',
  id .. ':progress')
if held[1] ~= 'running' then
  return {0, 0}
end
redis.call('HSET', KEYS[1], id .. ':beat_at', ARGV[2])
if ARGV[3] ~= '' and ARGV[3] ~= held[4] then
  redis.call('HSET', KEYS[1], id .. ':progress', ARGV[3])
  add_event(KEYS[2], ARGV[4], {'type', 'task_progress', 'task_id', id, 'agent', held[3],
    'text', ARGV[3]})
end
local cancel = 0
if held[2] == '1' then
  cancel = 1
end
return {1, cancel}
