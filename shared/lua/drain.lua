-- Move posted messages from the inbox into the log, in arrival order, unless a turn is
-- open (its transcript snapshot must stay the end of the log) or the room is paused (its
-- posts wait until it is resumed). If the room was not running, the first of them starts a
-- new run: the run's own fields are reset (its turn count, recent speakers, stop, answer,
-- token and cost totals run_*, policy:* fields).
-- An entry that cannot become a message (no sender or content, a blank one, a sender with
-- control characters, a field too long or not UTF-8, a ts that is not a unix time) is moved
-- to the dead-letter stream instead: its fields (at most 16, each cut to ARGV[7] bytes),
-- then inbox_id and reason. An entry without ts gets the time of its inbox id; a ts is
-- written as decimal seconds. Other fields of an entry are not copied to the log; the
-- traceparent of the entry that starts a run becomes the state's run_traceparent.
-- Each message moved is a message_committed event (seq, sender, run, inbox_id), after a
-- run_started event (run) when it starts the run.
-- KEYS[1] lease   KEYS[2] state   KEYS[3] inbox   KEYS[4] log   KEYS[5] dead letters
-- KEYS[6] events
-- ARGV[1] lease token   ARGV[2] epoch   ARGV[3] most entries to move (1..1000)
-- ARGV[4] dead-letter stream cap   ARGV[5] most bytes of a sender
-- ARGV[6] most bytes of a content   ARGV[7] most bytes of a value kept in a dead letter
-- ARGV[8] approximate cap of the log (0: never trimmed)   ARGV[9] events stream cap
-- Returns {number of messages moved, the state hash afterwards as a flat field/value list,
-- {inbox id, reason, ...} of the entries set aside}, so that the top of the coordinator's
-- turn loop is one round trip.
-- Fails, writing nothing, with LEASELOST (the token no longer holds the lease), BADARG (an
-- argument is malformed), BADSTATE (a state counter is not a count, or the log is ahead
-- of last_seq: no message could be appended there) or OVERFLOW (last_seq, run or
-- messages_in_run would reach its limit, lib/checks.lua).
-- @include checks
-- @include events
-- @include new_run
local MAX_FIELDS = 16
-- A W3C traceparent is 55 bytes; anything much longer is not one.
local TRACEPARENT_MAX = 128

local function utf8_valid(text)
  if not string.find(text, '[\128-\255]') then
    return true
  end
  local i, n = 1, #text
  while i <= n do
    local c = string.byte(text, i)
    local extra, low, high = 0, 0x80, 0xBF
    if c < 0x80 then
      extra = 0
    elseif c >= 0xC2 and c <= 0xDF then
      extra = 1
    elseif c == 0xE0 then
      extra, low = 2, 0xA0
    elseif c == 0xED then
      extra, high = 2, 0x9F
    elseif c >= 0xE1 and c <= 0xEF then
      extra = 2
    elseif c == 0xF0 then
      extra, low = 3, 0x90
    elseif c >= 0xF1 and c <= 0xF3 then
      extra = 3
    elseif c == 0xF4 then
      extra, high = 3, 0x8F
    else
      return false
    end
    if i + extra > n then
      return false
    end
    for j = i + 1, i + extra do
      local b = string.byte(text, j)
      if j == i + 1 and (b < low or b > high) then
        return false
      end
      if b < 0x80 or b > 0xBF then
        return false
      end
    end
    i = i + extra + 1
  end
  return true
end

-- Why text cannot be the entry's `name`, or nil when it can.
local function text_problem(name, text, most)
  if text == nil then
    return 'no ' .. name
  end
  if #text > most then
    return name .. ' is too long (' .. #text .. ' bytes, most ' .. most .. ')'
  end
  if not string.find(text, '%S') then
    return name .. ' is blank'
  end
  if not utf8_valid(text) then
    return name .. ' is not UTF-8'
  end
  return nil
end

-- The entry's ts as decimal seconds, or nil when it is not a unix time.
local function read_ts(value, id)
  if value == nil then
    return string.format('%.6f', tonumber(string.match(id, '^(%d+)')) / 1000)
  end
  local ts = tonumber(value)
  if ts == nil or ts ~= ts or ts < 0 or ts >= 1e11 then
    return nil
  end
  return string.format('%.6f', ts)
end

-- {sender, content, ts} of a readable entry, or nil and the reason it is not.
local function read_entry(id, fields, sender_max, content_max)
  local posted = {}
  for i = 1, #fields, 2 do
    posted[fields[i]] = fields[i + 1]
  end
  local problem = text_problem('sender', posted['sender'], sender_max)
  if problem == nil and string.find(posted['sender'], '%c') then
    problem = 'sender has control characters'
  end
  problem = problem or text_problem('content', posted['content'], content_max)
  if problem then
    return nil, problem
  end
  local ts = read_ts(posted['ts'], id)
  if ts == nil then
    return nil, 'ts is not a unix time in seconds'
  end
  return {sender = posted['sender'], content = posted['content'], ts = ts, inbox_id = id,
    traceparent = posted['traceparent']}
end

-- The dead letter's fields: the entry's own (bounded), then inbox_id and reason (last, so
-- that they win for readers that build a map, should the entry have fields of those names).
local function dead_letter(id, fields, reason, value_max)
  local letter, cut = {}, false
  local kept = math.min(#fields / 2, MAX_FIELDS)
  for i = 1, kept * 2 do
    local value = fields[i]
    if #value > value_max then
      value, cut = string.sub(value, 1, value_max), true
    end
    table.insert(letter, value)
  end
  if cut then
    reason = reason .. '; values cut to ' .. value_max .. ' bytes'
  end
  if #fields / 2 > kept then
    reason = reason .. '; ' .. (#fields / 2 - kept) .. ' fields dropped'
  end
  table.insert(letter, 'inbox_id')
  table.insert(letter, id)
  table.insert(letter, 'reason')
  table.insert(letter, reason)
  return letter
end

-- The seq of the log's newest entry (0 for none).
local function log_top(key)
  local top = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)
  if #top == 0 then
    return 0
  end
  return tonumber(string.match(top[1][1], '^(%d+)'))
end

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('LEASELOST drain refused')
end
local epoch, batch, dead_cap = count(ARGV[2]), count(ARGV[3]), count(ARGV[4])
local sender_max, content_max, value_max = count(ARGV[5]), count(ARGV[6]), count(ARGV[7])
local log_cap, events_cap = count(ARGV[8]), count(ARGV[9])
if not (epoch and batch and dead_cap and sender_max and content_max and value_max and log_cap
    and events_cap) or batch < 1 or batch > 1000 then
  return redis.error_reply('BADARG drain needs a token and eight counts (batch 1..1000)')
end
local held = redis.call('HMGET', KEYS[2], 'turn_open', 'paused')
if held[1] == '1' or held[2] == '1' then
  return {0, redis.call('HGETALL', KEYS[2]), {}}
end
local entries = redis.call('XRANGE', KEYS[3], '-', '+', 'COUNT', batch)
if #entries == 0 then
  return {0, redis.call('HGETALL', KEYS[2]), {}}
end

local good, dead, ids = {}, {}, {}
for _, entry in ipairs(entries) do
  local id, fields = entry[1], entry[2]
  table.insert(ids, id)
  local message, reason = read_entry(id, fields, sender_max, content_max)
  if message then
    table.insert(good, message)
  else
    table.insert(dead, {id = id, reason = reason, letter = dead_letter(id, fields, reason, value_max)})
  end
end

local counters = {}
if #good > 0 then
  local names = {'last_seq', 'run', 'messages_in_run'}
  local values = redis.call('HMGET', KEYS[2], unpack(names))
  for i, name in ipairs(names) do
    counters[name] = values[i] and count(values[i])
    if values[i] and counters[name] == nil then
      return redis.error_reply('BADSTATE ' .. name .. ' is not a count')
    end
    counters[name] = counters[name] or 0
  end
  if log_top(KEYS[4]) > counters['last_seq'] then
    return redis.error_reply('BADSTATE the log is ahead of last_seq ' .. counters['last_seq'])
  end
  counters['new_run'] = redis.call('HGET', KEYS[2], 'status') ~= 'running'
  -- A new run counts its messages from 0.
  local steps = {{'last_seq', #good}, {'messages_in_run', #good}}
  if counters['new_run'] then
    steps[2] = {'run', 1}
  end
  for _, step in ipairs(steps) do
    local refused = overflow(step[1], counters[step[1]], step[2])
    if refused then
      return refused
    end
  end
end

-- Every check is done: from here on, writes only. The log's first XADD comes first: should
-- it still be refused (an entry deleted from the log's top), nothing has been written.
if #good > 0 then
  local new_run = counters['new_run']
  local run, in_run = counters['run'], counters['messages_in_run']
  if new_run then
    run, in_run = run + 1, 0
  end
  local seq = counters['last_seq']
  for _, message in ipairs(good) do
    seq = seq + 1
    message.seq = seq
    local entry = {'seq', seq, 'sender', message.sender, 'content', message.content,
      'run', run, 'epoch', epoch, 'ts', message.ts}
    if log_cap > 0 then
      redis.call('XADD', KEYS[4], 'MAXLEN', '~', log_cap, seq .. '-0', unpack(entry))
    else
      redis.call('XADD', KEYS[4], seq .. '-0', unpack(entry))
    end
  end
  if new_run then
    start_run(KEYS[2])
    -- The run's trace continues the one of the post that started it, when it carried one.
    local traceparent = good[1].traceparent
    if traceparent and #traceparent <= TRACEPARENT_MAX then
      redis.call('HSET', KEYS[2], 'run_traceparent', traceparent)
    end
  end
  redis.call('HSET', KEYS[2], 'run', run, 'last_seq', seq, 'messages_in_run', in_run + #good)
  local ts = event_ts()
  if new_run then
    add_event(KEYS[6], events_cap, {'type', 'run_started', 'run', run}, ts)
  end
  for _, message in ipairs(good) do
    add_event(KEYS[6], events_cap, {'type', 'message_committed', 'seq', message.seq,
      'sender', message.sender, 'run', run, 'inbox_id', message.inbox_id}, ts)
  end
end
local set_aside = {}
for _, letter in ipairs(dead) do
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', dead_cap, '*', unpack(letter.letter))
  table.insert(set_aside, letter.id)
  table.insert(set_aside, letter.reason)
end
redis.call('XDEL', KEYS[3], unpack(ids))
redis.call('HSET', KEYS[2], 'inbox_last_id', ids[#ids])
return {#good, redis.call('HGETALL', KEYS[2]), set_aside}
