-- Count a take of the room that ended in an error the room cannot get past by itself
-- (not a lost lease, not an unreachable Redis or broker). At the limit, in a row, end the
-- room's run failed with stop_reason room_error and the error as stop_detail, and close
-- any open turn, so that the room is not taken again and again. A commit or a new run
-- resets the count (and so does a post: the client sets it to 0).
-- When the room fails it writes a run_ended event (run: the room's last run, status
-- failed, stop_reason room_error, stop_detail the error).
-- A take refused before its lease was taken (acquire.lua refused the room: its epoch at
-- its limit, a state that is not a count) is counted the same, while nobody holds the room
-- and it has not failed on its errors already (coordinators refused at the same time: the
-- room fails once).
-- KEYS[1] lease   KEYS[2] state   KEYS[3] inbox   KEYS[4] events
-- ARGV[1] lease token ('' for a refused take)   ARGV[2] most failed takes in a row
-- ARGV[3] the error, one line
-- ARGV[4] events stream cap
-- Returns {failed takes in a row, 1 when the room now failed, 2 when a refused take found
-- it failed already (nothing is written), else 0}. When it failed,
-- failed_inbox_id holds the newest inbox id then ('0-0' for none): a post with an id up to
-- it was waiting when the room failed.
-- Fails, writing nothing, with LEASELOST (the token does not hold the lease; for a refused
-- take, somebody holds it), NOROOM (the room has no state) or BADARG.
-- @include checks
-- @include events
local holder = redis.call('GET', KEYS[1])
if (ARGV[1] == '' and holder) or (ARGV[1] ~= '' and holder ~= ARGV[1]) then
  return redis.error_reply('LEASELOST failed take not counted')
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.error_reply('NOROOM the room has no state')
end
local most = count(ARGV[2])
if not most or most < 1 then
  return redis.error_reply('BADARG the most failed takes must be a positive count')
end
if ARGV[3] == nil or ARGV[3] == '' then
  return redis.error_reply('BADARG the error is missing')
end
if not count(ARGV[4]) then
  return redis.error_reply(BAD_EVENTS_CAP)
end
local previous = redis.call('HGET', KEYS[2], 'failed_takes')
local failed_takes = 1
-- A count that is not one (written by hand), or one at the limit, starts over rather than
-- failing the count: the room must still be able to end failed.
if count(previous) and count(previous) + 1 < COUNT_LIMIT then
  failed_takes = count(previous) + 1
end
if ARGV[1] == '' and failed_takes > tonumber(ARGV[2])
    and redis.call('HGET', KEYS[2], 'status') == 'failed' then
  return {failed_takes - 1, 2}
end
local newest = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)

-- Every check is done: from here on, writes only.
redis.call('HSET', KEYS[2], 'failed_takes', failed_takes, 'last_error', ARGV[3])
if failed_takes < most then
  return {failed_takes, 0}
end
local failed_inbox_id = '0-0'
if #newest > 0 then
  failed_inbox_id = newest[1][1]
end
redis.call('HSET', KEYS[2], 'status', 'failed', 'stop_reason', 'room_error',
  'stop_detail', ARGV[3], 'turn_open', 0, 'failed_inbox_id', failed_inbox_id)
add_event(KEYS[4], ARGV[4], {'type', 'run_ended', 'run', redis.call('HGET', KEYS[2], 'run') or '0',
  'status', 'failed', 'stop_reason', 'room_error', 'stop_detail', ARGV[3]})
return {failed_takes, 1}
