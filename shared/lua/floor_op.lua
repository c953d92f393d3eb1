-- Queue an operator's change of a mention room's floor (listen, talk, instruct,
-- regenerate) for its coordinator, which applies it with its next fenced write. A room
-- with no run in progress starts one, as a post does (drain.lua's resets of the run's own
-- fields), so that the change is served, and writes its run_started event (run); a paused
-- room keeps it until resumed. The floor:* fields change when the change is applied, so the
-- queue_changed event is the applying commit's.
-- KEYS[1] spec   KEYS[2] state   KEYS[3] floor ops   KEYS[4] events
-- ARGV[1] op   ARGV[2] agent ('' for none)   ARGV[3] text ('' for none)   ARGV[4] ts
-- ARGV[5] approximate cap of the ops stream   ARGV[6] events stream cap
-- Returns {op id, 1 when the room is paused else 0}.
-- Fails, writing nothing, with NOROOM (no such room), BADARG or OVERFLOW (the run number
-- has reached its limit, lib/checks.lua).
-- @include checks
-- @include events
-- @include new_run
if redis.call('EXISTS', KEYS[1]) == 0 or not redis.call('HGET', KEYS[2], 'status') then
  return redis.error_reply('NOROOM no such room')
end
local op = ARGV[1]
if op ~= 'listen' and op ~= 'talk' and op ~= 'instruct' and op ~= 'regenerate' then
  return redis.error_reply('BADARG op must be listen, talk, instruct or regenerate')
end
local cap = count(ARGV[5])
if not cap or cap < 1 then
  return redis.error_reply('BADARG the ops stream cap must be a positive count')
end
if not count(ARGV[6]) then
  return redis.error_reply(BAD_EVENTS_CAP)
end
local held = redis.call('HMGET', KEYS[2], 'status', 'paused', 'run')
local paused = 0
if held[2] == '1' then
  paused = 1
end
if held[1] ~= 'running' then
  local refused = overflow('run', held[3], 1)
  if refused then
    return refused
  end
end

-- Every check is done: from here on, writes only.
local id = redis.call('XADD', KEYS[3], 'MAXLEN', '~', cap, '*', 'op', op, 'agent', ARGV[2],
  'text', ARGV[3], 'ts', ARGV[4])
start_run_if_idle(KEYS[2], held[1], held[3], KEYS[4], ARGV[6])
return {id, paused}
