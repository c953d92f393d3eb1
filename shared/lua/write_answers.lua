-- Append answers to a room's answers stream, each with its answer_arrived event, and count
-- each answer's tokens and cost in the room's totals as it lands (the room's, the current
-- run's and its agent's): every answer that reaches Redis was paid for, whether its turn
-- still waits for it, was decided without it (a late answer) or was abandoned (a cancel).
-- Nothing is written when the room is gone: a call still out when its room was deleted,
-- archived or expired must not bring back a key of it. An answer whose id is already in
-- the answer ids (a write retried after its reply was lost) is not written or counted
-- again.
-- KEYS[1] state   KEYS[2] answers (bids)   KEYS[3] events   KEYS[4] answer ids (zset)
-- ARGV[1] approximate cap of the answers stream (and the most answer ids kept)
-- ARGV[2] events stream cap; then, per answer: its id ('' for none: never taken for a
-- repeat), its field count n and n field/value pairs, its event's field count m and m
-- field/value pairs (the answer_arrived fields but type and ts, which this script
-- writes), and its count k of state fields to increment with k field/amount pairs
-- Returns the number of answers written (0 when the room is gone: no event either).
-- Fails, writing nothing, with BADARG (a cap that is not a count, malformed counts or
-- pairs, an amount that is not a finite number) or BADSTATE (a total it would increment
-- is not a number).
-- @include checks
-- @include events
for i = 1, 2 do
  if count(ARGV[i]) == nil then
    return redis.error_reply('BADARG the caps must be counts')
  end
end

-- The n field/value pairs that follow ARGV[i] = n, and the index after them; nil when
-- ARGV[i] is not a count of pairs that are there (an event may have none: at_least 0).
local function pairs_at(i, at_least)
  local n = tonumber(ARGV[i])
  if n == nil or n < at_least or n ~= math.floor(n) or i + 2 * n > #ARGV then
    return nil
  end
  local fields = {}
  for j = i + 1, i + 2 * n do
    table.insert(fields, ARGV[j])
  end
  return fields, i + 2 * n + 1
end

local answers, i = {}, 3
while i <= #ARGV do
  local id, answer, event, increments = ARGV[i], nil, nil, nil
  answer, i = pairs_at(i + 1, 1)
  if answer then
    event, i = pairs_at(i, 0)
  end
  if event then
    increments, i = pairs_at(i, 0)
  end
  if not answer or not event or not increments then
    return redis.error_reply('BADARG an answer needs its id, a field count and its pairs, '
      .. "then its event's, then its increments'")
  end
  for j = 2, #increments, 2 do
    if finite(increments[j]) == nil then
      return redis.error_reply('BADARG ' .. increments[j - 1] .. ' increment is not a finite '
        .. 'number')
    end
  end
  table.insert(answers, {id = id, answer = answer, event = event, increments = increments})
end
if not redis.call('HGET', KEYS[1], 'status') then
  return 0
end
local fresh = {}
for _, written in ipairs(answers) do
  if written.id == '' or not redis.call('ZSCORE', KEYS[4], written.id) then
    table.insert(fresh, written)
    for j = 1, #written.increments, 2 do
      local total = redis.call('HGET', KEYS[1], written.increments[j])
      if total and finite(total) == nil then
        return redis.error_reply('BADSTATE ' .. written.increments[j] .. ' is not a number')
      end
    end
  end
end

-- Every check is done: from here on, writes only.
local ts = event_ts()
-- An answer id's score: when it was written, in ms.
local ms = math.floor(tonumber(ts) * 1000)
for _, written in ipairs(fresh) do
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*', unpack(written.answer))
  local event = {'type', 'answer_arrived'}
  for _, value in ipairs(written.event) do
    table.insert(event, value)
  end
  add_event(KEYS[3], ARGV[2], event, ts)
  for j = 1, #written.increments, 2 do
    redis.call('HINCRBYFLOAT', KEYS[1], written.increments[j], written.increments[j + 1])
  end
  if written.id ~= '' then
    redis.call('ZADD', KEYS[4], ms, written.id)
  end
end
-- The ids of about as many answers as the answers stream keeps: a retried write comes
-- within seconds of the one it repeats.
redis.call('ZREMRANGEBYRANK', KEYS[4], 0, -tonumber(ARGV[1]) - 1)
return #fresh
