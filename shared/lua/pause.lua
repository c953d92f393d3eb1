-- Pause a room: from now on no turn opens (open_turn.lua refuses) and no post moves from
-- the inbox to the log (drain.lua leaves them), until resume.lua. A turn already open is
-- finished and committed by its coordinator (its calls are out); the coordinator then lets
-- the room go. The run keeps its status: a paused run is still running.
-- A pause writes a room_paused event (run, status: the run's, turn_open 1 when a turn is
-- still to be committed).
-- KEYS[1] state   KEYS[2] events
-- ARGV[1] now (unix s)   ARGV[2] events stream cap
-- Returns 1 when the room was paused, 0 when it already was (nothing is written then).
-- Fails, writing nothing, with NOROOM or BADARG (the cap is not a count).
-- @include checks
-- @include events
local state = redis.call('HMGET', KEYS[1], 'status', 'paused', 'run', 'turn_open')
if not state[1] then
  return redis.error_reply('NOROOM no such room')
end
if not count(ARGV[2]) then
  return redis.error_reply(BAD_EVENTS_CAP)
end
if state[2] == '1' then
  return 0
end

-- Every check is done: from here on, writes only.
redis.call('HSET', KEYS[1], 'paused', 1, 'paused_at', ARGV[1])
add_event(KEYS[2], ARGV[2], {'type', 'room_paused', 'run', state[3] or '0', 'status', state[1],
  'turn_open', state[4] or '0'})
return 1
