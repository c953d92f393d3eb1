-- Finish a task, exactly once: record its result, count its tokens and cost in the room's
-- totals and its worker's, write task_finished, and queue the hand-back. Only a queued or
-- running task finishes: whoever comes second (the worker after the sweep failed its
-- lapsed heartbeat, a result after a cancel) changes nothing.
-- The hand-back: a relay in a room that takes instructions (its task's relay_as, set at
-- its start) is an instruction to the agent, queued as an operator's (floor_op.lua: the agent at the front of the queue, a run started when none
-- is in progress; refused once the discussion is over, as any instruction); otherwise the
-- task waits in the handbacks zset for the coordinator to post its result as the agent's
-- message once the turn under way ends (post_handback.lua), or to give the agent a relay
-- turn (relay_as 'turn': open_turn.lua, taken off the zset by that turn's commit.lua).
-- The task joins tasks_done; past ARGV[12] finished tasks the oldest handed back go, their
-- fields with them (one waiting for its hand-back stays until a later finish).
-- KEYS[1] spec (unused: the keys are task_start's)   KEYS[2] state   KEYS[3] tasks   KEYS[4] handbacks   KEYS[5] floor ops
-- KEYS[6] events   KEYS[7] tasks done   KEYS[8] task ids
-- ARGV[1] task id   ARGV[2] status (done, failed, cancelled, timed_out)   ARGV[3] result
-- ARGV[4] error   ARGV[5] now (unix s)   ARGV[6] prompt tokens   ARGV[7] completion tokens
-- ARGV[8] cost (USD)   ARGV[9] the relay's instruction   ARGV[10] events stream cap
-- ARGV[11] approximate cap of the floor ops stream   ARGV[12] finished tasks kept
-- Returns 1 when finished now, 0 when it had finished before (or does not exist).
-- Fails, writing nothing, with BADARG or OVERFLOW (a relay would start a run past the
-- limit).
-- @include checks
-- @include events
-- @include new_run
-- Every field a task's record may have (task_start, task_claim, task_beat, this script,
-- post_handback, the cancel flag and its revoke).
local FIELDS = {'agent', 'worker', 'hand_back', 'instruction', 'by', 'status', 'started_at',
  'beat_at', 'deadline', 'number', 'sent', 'cancel', 'revoked', 'relay_as', 'running_at',
  'result', 'error', 'finished_at', 'prompt_tokens', 'completion_tokens', 'cost_usd',
  'progress', 'handed_back'}

-- The task joins the finished ones; past ``kept`` the oldest handed back go. Only the ones
-- waiting in handbacks can be skipped, so that many more are looked at.
local function trim_finished(id, now_us, kept)
  redis.call('ZADD', KEYS[7], now_us, id)
  local extra = redis.call('ZCARD', KEYS[7]) - kept
  if extra <= 0 then
    return
  end
  local looked = redis.call('ZRANGE', KEYS[7], 0, extra + redis.call('ZCARD', KEYS[4]) - 1)
  for _, old in ipairs(looked) do
    if extra == 0 then
      return
    end
    if old ~= id and redis.call('HGET', KEYS[3], old .. ':handed_back') == '1' then
      for _, field in ipairs(FIELDS) do
        redis.call('HDEL', KEYS[3], old .. ':' .. field)
      end
      redis.call('ZREM', KEYS[7], old)
      redis.call('ZREM', KEYS[8], old)
      extra = extra - 1
    end
  end
end

local id, status = ARGV[1], ARGV[2]
if status ~= 'done' and status ~= 'failed' and status ~= 'cancelled' and status ~= 'timed_out' then
  return redis.error_reply('BADARG status must be done, failed, cancelled or timed_out')
end
local prompt, completion, cost = count(ARGV[6]), count(ARGV[7]), finite(ARGV[8])
if not prompt or not completion or not cost or cost < 0 or not finite(ARGV[5]) then
  return redis.error_reply('BADARG tokens must be counts, cost and now numbers')
end
if not count(ARGV[10]) or not count(ARGV[11]) then
  return redis.error_reply(BAD_EVENTS_CAP)
end
local kept = count(ARGV[12])
if not kept or kept < 1 then
  return redis.error_reply('BADARG the finished tasks kept must be a count above 0')
end
local task = redis.call('HMGET', KEYS[3], id .. ':status', id .. ':agent', id .. ':worker',
  id .. ':relay_as')
if task[1] ~= 'queued' and task[1] ~= 'running' then
  return 0
end
local agent, worker = task[2], task[3]
local relay = task[4] == 'instruct'
local held = redis.call('HMGET', KEYS[2], 'status', 'paused', 'run')
if relay and held[1] ~= 'running' then
  local refused = overflow('run', held[3], 1)
  if refused then
    return refused
  end
end

-- Every check is done: from here on, writes only.
redis.call('HSET', KEYS[3], id .. ':status', status, id .. ':result', ARGV[3],
  id .. ':error', ARGV[4], id .. ':finished_at', ARGV[5], id .. ':prompt_tokens', prompt,
  id .. ':completion_tokens', completion, id .. ':cost_usd', ARGV[8])
if prompt + completion > 0 or cost > 0 then
  for _, name in ipairs({'', 'agent:' .. worker .. ':'}) do
    redis.call('HINCRBY', KEYS[2], name .. 'prompt_tokens', prompt)
    redis.call('HINCRBY', KEYS[2], name .. 'completion_tokens', completion)
    redis.call('HINCRBYFLOAT', KEYS[2], name .. 'cost_usd', ARGV[8])
  end
end
add_event(KEYS[6], ARGV[10], {'type', 'task_finished', 'task_id', id, 'agent', agent,
  'worker', worker, 'status', status, 'error', ARGV[4]})
if relay then
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[11], '*', 'op', 'instruct', 'agent', agent,
    'text', ARGV[9], 'ts', ARGV[5])
  redis.call('HSET', KEYS[3], id .. ':handed_back', 1)
  start_run_if_idle(KEYS[2], held[1], held[3], KEYS[6], ARGV[10])
else
  redis.call('ZADD', KEYS[4], math.floor(tonumber(ARGV[5]) * 1000), id)
end
-- By the microsecond: tasks finished within one millisecond still go oldest first.
trim_finished(id, math.floor(tonumber(ARGV[5]) * 1000000), kept)
return 1
