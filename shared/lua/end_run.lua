-- End the current run outside a turn (e.g. max_messages was reached by posted messages).
-- It writes the watch's event when the fields it sets change a watched one (a mention
-- room's queue_changed: run, then each watched field afterwards), then a run_ended event
-- (run, status, stop_reason, stop_detail, answer if any).
-- KEYS[1] lease   KEYS[2] state   KEYS[3] events
-- ARGV[1] lease token   ARGV[2] status (idle or failed)   ARGV[3] stop reason   ARGV[4] detail
-- ARGV[5] events stream cap
-- ARGV[6] the policy's watch as JSON (lib/watched.lua), or '' for none
-- ARGV[7..] optional field/value pairs to set with it: only ``floor:*`` fields (a floor
-- policy's room-scoped state, as the run's end leaves it)
-- Returns 1. Fails, writing nothing, with LEASELOST, TURNOPEN or BADARG (a status a run
-- cannot end in, a missing argument, a cap that is not a count, a watch not as above,
-- fields not in pairs or not floor:*).
-- @include checks
-- @include events
-- @include watched
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('LEASELOST end refused')
end
if redis.call('HGET', KEYS[2], 'turn_open') == '1' then
  return redis.error_reply('TURNOPEN a turn is open')
end
if ARGV[2] ~= 'idle' and ARGV[2] ~= 'failed' then
  return redis.error_reply('BADARG status must be idle or failed')
end
if ARGV[3] == nil or ARGV[4] == nil then
  return redis.error_reply('BADARG end_run needs a stop reason and a detail')
end
if not count(ARGV[5]) then
  return redis.error_reply(BAD_EVENTS_CAP)
end
local watch = nil
if ARGV[6] ~= nil and ARGV[6] ~= '' then
  local decoded, value = pcall(cjson.decode, ARGV[6])
  local problem = decoded and watch_problem(value) or (not decoded and 'watch is not JSON')
  if problem then
    return redis.error_reply('BADARG ' .. problem)
  end
  watch = value
end
if #ARGV > 6 and (#ARGV - 6) % 2 ~= 0 then
  return redis.error_reply('BADARG end_run fields come in field/value pairs')
end
for i = 7, #ARGV, 2 do
  if string.sub(ARGV[i], 1, 6) ~= 'floor:' then
    return redis.error_reply('BADARG end_run sets only floor:* fields, not ' .. ARGV[i])
  end
end

-- Every check is done: from here on, writes only.
local before = watched_values(watch)
redis.call('HSET', KEYS[2], 'status', ARGV[2], 'stop_reason', ARGV[3], 'stop_detail', ARGV[4])
for i = 7, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
local after = watched_values(watch)
local run = redis.call('HMGET', KEYS[2], 'run', 'answer')  -- false when absent
local ts = event_ts()
local changed = watched_event(watch, before, after, run[1] or '0')
if changed then
  add_event(KEYS[3], ARGV[5], changed, ts)
end
local event = {'type', 'run_ended', 'run', run[1] or '0', 'status', ARGV[2],
  'stop_reason', ARGV[3], 'stop_detail', ARGV[4]}
if run[2] and run[2] ~= '' then
  table.insert(event, 'answer')
  table.insert(event, run[2])
end
add_event(KEYS[3], ARGV[5], event, ts)
return 1
