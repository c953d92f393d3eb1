-- Pause a room: from now on no turn opens (open_turn.lua refuses) and no post moves from
-- the inbox to the log (drain.lua leaves them), until resume.lua. A turn already open is
-- finished and committed by its coordinator (its calls are out); the coordinator then lets
-- the room go. The run keeps its status: a paused run is still running.
-- KEYS[1] state
-- ARGV[1] now (unix s)
-- Returns 1 when the room was paused, 0 when it already was (nothing is written then).
-- Fails, writing nothing, with NOROOM.
if not redis.call('HGET', KEYS[1], 'status') then
  return redis.error_reply('NOROOM no such room')
end
if redis.call('HGET', KEYS[1], 'paused') == '1' then
  return 0
end

-- Every check is done: from here on, writes only.
redis.call('HSET', KEYS[1], 'paused', 1, 'paused_at', ARGV[1])
return 1
