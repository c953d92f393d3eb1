-- Move posted messages from the inbox into the log, in arrival order, unless a turn is
-- open (its transcript snapshot must stay the end of the log). If the room was not
-- running, the first of them starts a new run.
-- KEYS[1] lease   KEYS[2] state   KEYS[3] inbox   KEYS[4] log
-- ARGV[1] lease token   ARGV[2] epoch   ARGV[3] most entries to move
-- Returns {number of messages moved, the state hash afterwards as a flat field/value list},
-- so that the top of the coordinator's turn loop is one round trip.
-- Fails with LEASELOST (and writes nothing) when the token no longer holds the lease.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('LEASELOST drain refused')
end
if redis.call('HGET', KEYS[2], 'turn_open') == '1' then
  return {0, redis.call('HGETALL', KEYS[2])}
end
local entries = redis.call('XRANGE', KEYS[3], '-', '+', 'COUNT', ARGV[3])
if #entries == 0 then
  return {0, redis.call('HGETALL', KEYS[2])}
end
if redis.call('HGET', KEYS[2], 'status') ~= 'running' then
  redis.call('HINCRBY', KEYS[2], 'run', 1)
  redis.call('HSET', KEYS[2], 'status', 'running', 'messages_in_run', 0, 'run_turns', 0, 'recent', '[]',
    'stop_reason', '', 'stop_detail', '', 'answer', '')
  -- The policy's own fields (policy:*) belong to the run that ends here.
  local fields = redis.call('HKEYS', KEYS[2])
  for _, field in ipairs(fields) do
    if string.sub(field, 1, 7) == 'policy:' then
      redis.call('HDEL', KEYS[2], field)
    end
  end
end
local run = redis.call('HGET', KEYS[2], 'run')
for _, entry in ipairs(entries) do
  local id, fields = entry[1], entry[2]
  local posted = {}
  for i = 1, #fields, 2 do
    posted[fields[i]] = fields[i + 1]
  end
  local seq = redis.call('HINCRBY', KEYS[2], 'last_seq', 1)
  redis.call('XADD', KEYS[4], seq .. '-0', 'seq', seq, 'sender', posted['sender'],
    'content', posted['content'], 'run', run, 'epoch', ARGV[2], 'ts', posted['ts'])
  redis.call('XDEL', KEYS[3], id)
  redis.call('HSET', KEYS[2], 'inbox_last_id', id)
end
redis.call('HINCRBY', KEYS[2], 'messages_in_run', #entries)
return {#entries, redis.call('HGETALL', KEYS[2])}
