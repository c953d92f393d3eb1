-- Append answers to a room's answers stream, each with its answer_arrived event, unless the
-- room is gone: a call still out when its room was deleted, archived or expired must not
-- bring back a key of it.
-- KEYS[1] state   KEYS[2] answers (bids)   KEYS[3] events
-- ARGV[1] approximate cap of the answers stream   ARGV[2] events stream cap; then, per
-- answer, its field count n and its n field/value pairs, then its event's field count m
-- and m field/value pairs (the answer_arrived fields but type and ts, which this script
-- writes)
-- Returns the number of answers written (0 when the room is gone: no event either).
-- Fails, writing nothing, with BADARG (a cap that is not a count, malformed counts or
-- pairs).
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
  local answer, event
  answer, i = pairs_at(i, 1)
  if answer then
    event, i = pairs_at(i, 0)
  end
  if not answer or not event then
    return redis.error_reply('BADARG an answer needs a field count and its pairs, then its '
      .. "event's")
  end
  table.insert(answers, {answer = answer, event = event})
end
if not redis.call('HGET', KEYS[1], 'status') then
  return 0
end

-- Every check is done: from here on, writes only.
local ts = event_ts()
for _, written in ipairs(answers) do
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*', unpack(written.answer))
  local event = {'type', 'answer_arrived'}
  for _, value in ipairs(written.event) do
    table.insert(event, value)
  end
  add_event(KEYS[3], ARGV[2], event, ts)
end
return #answers
