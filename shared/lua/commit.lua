-- Commit a decided turn, all or nothing: append the winner's message (if any) to the log,
-- update the room's state and usage totals, and write the turn record.
-- KEYS[1] lease   KEYS[2] state   KEYS[3] log   KEYS[4] turns
-- ARGV[1] lease token   ARGV[2] turn   ARGV[3] expected last seq   ARGV[4] JSON payload:
--   message: flat fields of the winner's message without seq, or absent for no winner
--   fields:  {state field: value} to set: recent speakers, the policy's own fields, answer
--   stop:    {status, reason, detail} when the run ends with this turn, else absent
--   usage:   {state field: increment} token and cost totals
--   record:  flat fields of the turn record
--   turns_maxlen: approximate cap on the turns stream
-- Returns the new message's seq, or 0 when the turn had no winner.
-- Fails, writing nothing, with LEASELOST (token no longer holds the lease), NOTURN (that
-- turn is not the open one) or STALESEQ (the log moved since the coordinator read it).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('LEASELOST commit refused')
end
local state = redis.call('HMGET', KEYS[2], 'turn', 'turn_open', 'last_seq')
if state[1] ~= ARGV[2] or state[2] ~= '1' then
  return redis.error_reply('NOTURN turn ' .. ARGV[2] .. ' is not open')
end
if (state[3] or '0') ~= ARGV[3] then
  return redis.error_reply('STALESEQ log is at ' .. tostring(state[3]) .. ', not ' .. ARGV[3])
end
local payload = cjson.decode(ARGV[4])
local seq = 0
if payload['message'] then
  seq = tonumber(ARGV[3]) + 1
  local fields = {'seq', seq}
  for name, value in pairs(payload['message']) do
    table.insert(fields, name)
    table.insert(fields, value)
  end
  redis.call('XADD', KEYS[3], seq .. '-0', unpack(fields))
  redis.call('HSET', KEYS[2], 'last_seq', seq)
  redis.call('HINCRBY', KEYS[2], 'messages_in_run', 1)
end
redis.call('HSET', KEYS[2], 'turn_open', 0)
for field, value in pairs(payload['fields']) do
  redis.call('HSET', KEYS[2], field, value)
end
for field, amount in pairs(payload['usage']) do
  redis.call('HINCRBYFLOAT', KEYS[2], field, amount)
end
if payload['stop'] then
  local stop = payload['stop']
  redis.call('HSET', KEYS[2], 'status', stop['status'], 'stop_reason', stop['reason'],
    'stop_detail', stop['detail'])
end
local record = {'seq', seq}
for name, value in pairs(payload['record']) do
  table.insert(record, name)
  table.insert(record, value)
end
redis.call('XADD', KEYS[4], 'MAXLEN', '~', payload['turns_maxlen'], '*', unpack(record))
return seq
