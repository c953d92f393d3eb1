-- Post a finished task's result as its agent's message, with no generation, once the turn
-- under way has ended (the coordinator's, fenced by its lease); exactly once: the task
-- leaves the handbacks zset and is marked handed back in the same write. The message names
-- its task and the worker that wrote it; it is an agent's, so the names it carries ask no
-- one.
-- KEYS[1] lease   KEYS[2] state   KEYS[3] log   KEYS[4] tasks   KEYS[5] handbacks
-- KEYS[6] events
-- ARGV[1] lease token   ARGV[2] task id   ARGV[3] the message's content   ARGV[4] now
-- ARGV[5] approximate cap on the log ('0': never trimmed)   ARGV[6] events stream cap
-- Returns the message's seq; 0 when a turn is open (try again after it) or when the task
-- was handed back before.
-- Fails, writing nothing, with LEASELOST, BADARG, BADSTATE or OVERFLOW.
-- @include checks
-- @include events
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('LEASELOST post refused')
end
if not count(ARGV[5]) or not count(ARGV[6]) then
  return redis.error_reply(BAD_EVENTS_CAP)
end
if ARGV[3] == '' then
  return redis.error_reply('BADARG the content is empty')
end
local id = ARGV[2]
local task = redis.call('HMGET', KEYS[4], id .. ':agent', id .. ':worker', id .. ':handed_back')
if not task[1] or task[3] == '1' or not redis.call('ZSCORE', KEYS[5], id) then
  redis.call('ZREM', KEYS[5], id)
  return 0
end
local state = redis.call('HMGET', KEYS[2], 'turn_open', 'last_seq', 'run', 'status',
  'messages_in_run', 'epoch')
if state[1] == '1' then
  return 0
end
local last = count(state[2] or '0')
if not last then
  return redis.error_reply('BADSTATE last_seq is not a count')
end
local refused = overflow('last_seq', state[2], 1)
if refused then
  return refused
end

-- Every check is done: from here on, writes only.
local seq = last + 1
local fields = {'seq', seq, 'sender', task[1], 'content', ARGV[3], 'run', state[3] or '0',
  'epoch', state[6] or '0', 'ts', ARGV[4], 'task_id', id, 'worker', task[2]}
if tonumber(ARGV[5]) > 0 then
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[5], seq .. '-0', unpack(fields))
else
  redis.call('XADD', KEYS[3], seq .. '-0', unpack(fields))
end
redis.call('HSET', KEYS[2], 'last_seq', seq)
if state[4] == 'running' then
  redis.call('HINCRBY', KEYS[2], 'messages_in_run', 1)
end
redis.call('HSET', KEYS[4], id .. ':handed_back', 1)
redis.call('ZREM', KEYS[5], id)
add_event(KEYS[6], ARGV[6], {'type', 'message_committed', 'seq', seq, 'sender', task[1],
  'run', state[3] or '0'})
return seq
