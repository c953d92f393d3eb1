-- End a room's current run now: status idle, stop_reason cancelled. A turn in flight is
-- abandoned whole: no message and no turn record of it are written (answers that arrive for
-- it stay in the answers stream, unused). The lease goes too, which fences the coordinator
-- holding the room out: its next fenced write (a commit included) fails with LEASELOST,
-- and its lease keeper stops its work on the room at the next renewal. Posts waiting in
-- the inbox stay there: like any post into an idle room, they start the next run.
-- A cancel writes a run_ended event (run, status idle, stop_reason cancelled, stop_detail,
-- answer if the run has one so far), as any end of a run does.
-- KEYS[1] lease   KEYS[2] state   KEYS[3] inbox   KEYS[4] events
-- ARGV[1] the stop detail (who or why)   ARGV[2] events stream cap
-- Returns {1 when a run was cancelled else 0 (no run in progress: nothing is written), the
-- run's number, posts waiting in the inbox}.
-- Fails, writing nothing, with NOROOM or BADARG (the cap is not a count).
-- @include checks
-- @include events
local state = redis.call('HMGET', KEYS[2], 'status', 'run', 'answer')
if not state[1] then
  return redis.error_reply('NOROOM no such room')
end
if not count(ARGV[2]) then
  return redis.error_reply(BAD_EVENTS_CAP)
end
local run = tonumber(state[2] or '0') or 0
local waiting = redis.call('XLEN', KEYS[3])
if state[1] ~= 'running' then
  return {0, run, waiting}
end

-- Every check is done: from here on, writes only.
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'status', 'idle', 'stop_reason', 'cancelled',
  'stop_detail', ARGV[1], 'turn_open', 0, 'failed_takes', 0)
local event = {'type', 'run_ended', 'run', run, 'status', 'idle', 'stop_reason', 'cancelled',
  'stop_detail', ARGV[1]}
if state[3] and state[3] ~= '' then
  table.insert(event, 'answer')
  table.insert(event, state[3])
end
add_event(KEYS[4], ARGV[2], event)
return {1, run, waiting}
