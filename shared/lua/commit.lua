-- Commit a decided turn, all or nothing: append the winner's message (if any) to the log,
-- update the room's state and usage totals, and write the turn record.
-- KEYS[1] lease   KEYS[2] state   KEYS[3] log   KEYS[4] turns   KEYS[5] events
-- KEYS[6] inbox (optional: then the reply also says what the next turn needs, see below)
-- KEYS[7] tasks   KEYS[8] handbacks (both given with the payload's handback)
-- ARGV[1] lease token   ARGV[2] turn   ARGV[3] expected last seq   ARGV[4] JSON payload:
--   message: flat fields of the winner's message without seq (sender and content not
--            empty), or absent for no winner
--   fields:  {state field: value} to set: recent speakers, the policy's own fields, answer
--   stop:    {status (idle or failed), reason, detail} when the run ends with this turn
--   usage:   {state field: increment} (finite numbers): the coordinator's are each
--            agent's count of calls (agent:<name>:calls); the answers' tokens and cost
--            were counted as they landed (write_answers.lua)
--   record:  flat fields of the turn record without seq
--   turns_maxlen: approximate cap on the turns stream
--   log_maxlen: approximate cap on the log ('0': never trimmed)
--   events_maxlen: approximate cap on the events stream
--   handback: the task id a relay turn relayed (absent otherwise): the task leaves the
--            handbacks zset and is marked handed back in the same write
--   watch:   the policy's fields followers see change, and the event a change writes, or
--            absent (lib/watched.lua: {event, fields: [[state field, event field, value
--            when absent], ...]})
-- A commit also resets failed_takes: the room got past whatever failed before.
-- Its events, in order: message_committed (seq, sender, run, turn) when there is a winner,
-- the watch's event (run, then each watched field as it is afterwards: a mention room's
-- queue_changed) when the fields it sets change a watched one, turn_decided (turn, run,
-- and winner, score, stop_reason when set), and run_ended (run, status, stop_reason,
-- stop_detail, answer if any) when the turn ends the run.
-- Returns the new message's seq, or 0 when the turn had no winner. With KEYS[6]: {that
-- seq, the number of inbox entries waiting, the state hash afterwards as a flat field/value
-- list}: with an empty inbox a drain would move nothing, so the coordinator goes on from
-- this state without one (a round trip less per turn).
-- Fails, writing nothing, with LEASELOST (token no longer holds the lease), NOTURN (that
-- turn is not the open one), STALESEQ (the log moved since the coordinator read it),
-- BADPAYLOAD (the payload is not as above), BADSTATE (a counter or total it would
-- change is not a number, or the log is ahead of last_seq) or OVERFLOW (last_seq,
-- messages_in_run or a total would reach its limit, lib/checks.lua).
-- @include checks
-- @include events
-- @include watched

-- Why `fields` is not a flat map of string or number values, or nil when it is.
local function flat_problem(name, fields)
  if type(fields) ~= 'table' then
    return name .. ' is not an object'
  end
  for field, value in pairs(fields) do
    if type(field) ~= 'string' then
      return name .. ' is not an object'
    end
    if field == 'seq' then
      return name .. ' seq is set by the script'
    end
    if type(value) ~= 'string' and type(value) ~= 'number' then
      return name .. ' ' .. field .. ' is not a string or number'
    end
  end
  return nil
end

local function payload_problem(payload)
  local message = payload['message']
  if message ~= nil then
    local problem = flat_problem('message', message)
    if problem then
      return problem
    end
    for _, field in ipairs({'sender', 'content'}) do
      if type(message[field]) ~= 'string' or message[field] == '' then
        return 'message ' .. field .. ' is missing or empty'
      end
    end
  end
  local problem = flat_problem('fields', payload['fields'])
  if problem then
    return problem
  end
  if type(payload['usage']) ~= 'table' then
    return 'usage is not an object'
  end
  for field, amount in pairs(payload['usage']) do
    if type(field) ~= 'string' or finite(amount) == nil then
      return 'usage ' .. tostring(field) .. ' is not a finite number'
    end
  end
  local stop = payload['stop']
  if stop ~= nil then
    if type(stop) ~= 'table' then
      return 'stop is not an object'
    end
    if stop['status'] ~= 'idle' and stop['status'] ~= 'failed' then
      return 'stop status must be idle or failed'
    end
    for _, field in ipairs({'reason', 'detail'}) do
      if type(stop[field]) ~= 'string' then
        return 'stop ' .. field .. ' is not a string'
      end
    end
  end
  problem = flat_problem('record', payload['record'])
  if problem then
    return problem
  end
  local handback = payload['handback']
  if handback ~= nil and (type(handback) ~= 'string' or handback == '' or not KEYS[8]) then
    return 'handback is not a task id, or its keys are not given'
  end
  problem = watch_problem(payload['watch'])
  if problem then
    return problem
  end
  for _, name in ipairs({'turns_maxlen', 'log_maxlen', 'events_maxlen'}) do
    if count(payload[name]) == nil then
      return name .. ' is not a count'
    end
  end
  return nil
end

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('LEASELOST commit refused')
end
local state = redis.call('HMGET', KEYS[2], 'turn', 'turn_open', 'last_seq', 'messages_in_run',
  'run')
if state[1] ~= ARGV[2] or state[2] ~= '1' then
  return redis.error_reply('NOTURN turn ' .. ARGV[2] .. ' is not open')
end
if (state[3] or '0') ~= ARGV[3] then
  return redis.error_reply('STALESEQ log is at ' .. tostring(state[3]) .. ', not ' .. ARGV[3])
end
local decoded, payload = pcall(cjson.decode, ARGV[4])
-- cjson reads a JSON null as a sentinel: treat it as absent.
if not decoded or type(payload) ~= 'table' or payload[1] ~= nil then
  return redis.error_reply('BADPAYLOAD payload is not a JSON object')
end
for name, value in pairs(payload) do
  if value == cjson.null then
    payload[name] = nil
  end
end
local problem = payload_problem(payload)
if problem then
  return redis.error_reply('BADPAYLOAD ' .. problem)
end
local last_seq = tonumber(ARGV[3])
if payload['message'] then
  if count(ARGV[3]) == nil then
    return redis.error_reply('BADSTATE last_seq is not a count')
  end
  if state[4] and count(state[4]) == nil then
    return redis.error_reply('BADSTATE messages_in_run is not a count')
  end
  local top = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
  if #top > 0 and tonumber(string.match(top[1][1], '^(%d+)')) > last_seq then
    return redis.error_reply('BADSTATE the log is ahead of last_seq ' .. ARGV[3])
  end
  local refused = overflow('last_seq', ARGV[3], 1) or overflow('messages_in_run', state[4], 1)
  if refused then
    return refused
  end
end
local usage_fields = {}
for field, _ in pairs(payload['usage']) do
  table.insert(usage_fields, field)
end
if #usage_fields > 0 then
  local totals = redis.call('HMGET', KEYS[2], unpack(usage_fields))
  for i, field in ipairs(usage_fields) do
    if totals[i] and finite(totals[i]) == nil then
      return redis.error_reply('BADSTATE ' .. field .. ' is not a number')
    end
    local refused = overflow(field, totals[i], tonumber(payload['usage'][field]))
    if refused then
      return refused
    end
  end
end

-- Every check is done: from here on, writes only. The log's XADD comes first: should it
-- still be refused (an entry deleted from the log's top), nothing has been written.
local seq = 0
if payload['message'] then
  seq = last_seq + 1
  local fields = {'seq', seq}
  for name, value in pairs(payload['message']) do
    table.insert(fields, name)
    table.insert(fields, value)
  end
  if tonumber(payload['log_maxlen']) > 0 then
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', payload['log_maxlen'], seq .. '-0', unpack(fields))
  else
    redis.call('XADD', KEYS[3], seq .. '-0', unpack(fields))
  end
  redis.call('HSET', KEYS[2], 'last_seq', seq)
  redis.call('HINCRBY', KEYS[2], 'messages_in_run', 1)
end
redis.call('HSET', KEYS[2], 'turn_open', 0, 'failed_takes', 0, 'turn_relay', '')
if payload['handback'] then
  redis.call('ZREM', KEYS[8], payload['handback'])
  redis.call('HSET', KEYS[7], payload['handback'] .. ':handed_back', 1)
end
local watched_before = watched_values(payload['watch'])
for field, value in pairs(payload['fields']) do
  redis.call('HSET', KEYS[2], field, value)
end
local watched_after = watched_values(payload['watch'])
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

local ts = event_ts()
local run = state[5] or '0'
local function add_turn_event(fields)
  add_event(KEYS[5], payload['events_maxlen'], fields, ts)
end
local decided = {'type', 'turn_decided', 'turn', ARGV[2], 'run', run}
if payload['message'] then
  local message = payload['message']
  add_turn_event({'type', 'message_committed', 'seq', seq, 'sender', message['sender'],
    'run', run, 'turn', ARGV[2]})
  table.insert(decided, 'winner')
  table.insert(decided, message['sender'])
  if message['score'] ~= nil then
    table.insert(decided, 'score')
    table.insert(decided, message['score'])
  end
end
if payload['stop'] then
  table.insert(decided, 'stop_reason')
  table.insert(decided, payload['stop']['reason'])
end
local changed = watched_event(payload['watch'], watched_before, watched_after, run)
if changed then
  add_turn_event(changed)
end
add_turn_event(decided)
if payload['stop'] then
  local stop = payload['stop']
  local ended = {'type', 'run_ended', 'run', run, 'status', stop['status'],
    'stop_reason', stop['reason'], 'stop_detail', stop['detail']}
  local answer = redis.call('HGET', KEYS[2], 'answer')
  if answer and answer ~= '' then
    table.insert(ended, 'answer')
    table.insert(ended, answer)
  end
  add_turn_event(ended)
end
if KEYS[6] then
  return {seq, redis.call('XLEN', KEYS[6]), redis.call('HGETALL', KEYS[2])}
end
return seq
