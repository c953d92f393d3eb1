-- End the current run outside a turn (e.g. max_messages was reached by posted messages).
-- KEYS[1] lease   KEYS[2] state
-- ARGV[1] lease token   ARGV[2] status (idle or failed)   ARGV[3] stop reason   ARGV[4] detail
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
redis.call('HSET', KEYS[2], 'status', ARGV[2], 'stop_reason', ARGV[3], 'stop_detail', ARGV[4])
return 1
