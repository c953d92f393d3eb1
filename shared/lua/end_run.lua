-- End the current run outside a turn (e.g. max_messages was reached by posted messages).
-- KEYS[1] lease   KEYS[2] state
-- ARGV[1] lease token   ARGV[2] status   ARGV[3] stop reason   ARGV[4] detail
-- Returns 1. Fails with LEASELOST or TURNOPEN, writing nothing.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('LEASELOST end refused')
end
if redis.call('HGET', KEYS[2], 'turn_open') == '1' then
  return redis.error_reply('TURNOPEN a turn is open')
end
redis.call('HSET', KEYS[2], 'status', ARGV[2], 'stop_reason', ARGV[3], 'stop_detail', ARGV[4])
return 1
