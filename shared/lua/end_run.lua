-- End the current run outside a turn (e.g. max_messages was reached by posted messages).
-- KEYS[1] lease   KEYS[2] state
-- ARGV[1] lease token   ARGV[2] status (idle or failed)   ARGV[3] stop reason   ARGV[4] detail
-- ARGV[5..] optional field/value pairs to set with it: only ``floor:*`` fields (a floor
-- policy's room-scoped state, as the run's end leaves it)
-- Returns 1. Fails, writing nothing, with LEASELOST, TURNOPEN or BADARG (a status a run
-- cannot end in, or a missing argument).
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
if #ARGV % 2 ~= 0 then
  return redis.error_reply('BADARG end_run fields come in field/value pairs')
end
for i = 5, #ARGV, 2 do
  if string.sub(ARGV[i], 1, 6) ~= 'floor:' then
    return redis.error_reply('BADARG end_run sets only floor:* fields, not ' .. ARGV[i])
  end
end
redis.call('HSET', KEYS[2], 'status', ARGV[2], 'stop_reason', ARGV[3], 'stop_detail', ARGV[4])
for i = 5, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
return 1
