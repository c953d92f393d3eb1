-- Open the room's next turn: fix its number, deadline and transcript snapshot, and note
-- where in the bids stream its bids start, so that a coordinator taking over can resume it.
-- It writes a turn_opened event (turn, run, phase 0, deadline).
-- KEYS[1] lease   KEYS[2] state   KEYS[3] bids   KEYS[4] events
-- ARGV[1] lease token   ARGV[2] deadline (unix s)   ARGV[3] now (unix s)
-- ARGV[4] events stream cap   ARGV[5] the run's trace (its invoke_workflow span's W3C
-- traceparent, kept as the state's trace field for a coordinator taking over), or ''
-- ARGV[6] (optional) a relay turn's task id: the turn is the agent's relay of that task's
--   result (kept as turn_relay for a coordinator taking over, cleared by its commit); it
--   is not counted in run_turns (the policy's own turns), and in a room with no run under
--   way it starts one, as a post would (run_started event)
-- Returns {turn, snapshot seq, bids stream id the turn's bids come after}.
-- Fails, writing nothing, with LEASELOST (the token no longer holds the lease), TURNOPEN
-- (a turn is already open: resume it instead), PAUSED (the room was paused: let it go),
-- BADARG (a time is not a finite number, the cap not a count), BADSTATE (turn, run_turns
-- or last_seq is not a count) or OVERFLOW (turn or run_turns has reached its limit,
-- lib/checks.lua).
-- @include checks
-- @include events
-- @include new_run

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('LEASELOST open refused')
end
local state = redis.call('HMGET', KEYS[2], 'turn_open', 'turn', 'run_turns', 'last_seq', 'run',
  'paused', 'status')
local relay = ARGV[6] or ''
if state[1] == '1' then
  return redis.error_reply('TURNOPEN a turn is already open')
end
if state[6] == '1' then
  return redis.error_reply('PAUSED the room is paused')
end
if finite(ARGV[2]) == nil then
  return redis.error_reply('BADARG deadline is not a unix time')
end
if finite(ARGV[3]) == nil then
  return redis.error_reply('BADARG now is not a unix time')
end
if not count(ARGV[4]) then
  return redis.error_reply(BAD_EVENTS_CAP)
end
for i, name in ipairs({'turn', 'run_turns', 'last_seq'}) do
  local value = state[i + 1]
  if value and count(value) == nil then
    return redis.error_reply('BADSTATE ' .. name .. ' is not a count')
  end
end
for i, name in ipairs({'turn', 'run_turns'}) do
  local refused = overflow(name, state[i + 1], 1)
  if refused then
    return refused
  end
end
local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
local bids_from = '0-0'
if #last > 0 then
  bids_from = last[1][1]
end

local run = state[5] or '0'
if relay ~= '' and state[7] ~= 'running' then
  local refused = overflow('run', state[5], 1)
  if refused then
    return refused
  end
end

-- Every check is done: from here on, writes only.
if relay ~= '' and state[7] ~= 'running' then
  run = (tonumber(run) or 0) + 1
  start_run(KEYS[2])
  redis.call('HSET', KEYS[2], 'run', run, 'messages_in_run', 0)
  add_event(KEYS[4], ARGV[4], {'type', 'run_started', 'run', run})
end
local turn = redis.call('HINCRBY', KEYS[2], 'turn', 1)
if relay == '' then
  redis.call('HINCRBY', KEYS[2], 'run_turns', 1)
end
redis.call('HSET', KEYS[2], 'turn_relay', relay)
local snapshot = state[4] or '0'
redis.call('HSET', KEYS[2], 'turn_open', 1, 'turn_deadline', ARGV[2], 'turn_opened_at', ARGV[3],
  'turn_snapshot_seq', snapshot, 'turn_bids_from', bids_from)
if ARGV[5] and ARGV[5] ~= '' then
  redis.call('HSET', KEYS[2], 'trace', ARGV[5])
end
add_event(KEYS[4], ARGV[4], {'type', 'turn_opened', 'turn', turn, 'run', run,
  'phase', 0, 'deadline', ARGV[2]})
return {turn, tonumber(snapshot), bids_from}
