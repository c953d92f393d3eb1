-- Put one record in a room's tool journal, only where the field holds what the caller
-- expects: nothing (claim a tool call's start, record a model step's tool calls: the first
-- writer wins) or the start it read (replace it with the call's result, or a stale start
-- with a new one). With the record goes its event (tool_called, tool_result), and with a
-- result a wake-up on the call's list for whoever waits for it. The journal keeps about
-- ARGV[2] fields, the oldest dropped. Nothing is written when the room is gone.
-- KEYS[1] state   KEYS[2] tools (hash)   KEYS[3] tool ids (zset)   KEYS[4] events
-- KEYS[5] the call's wake-up list
-- ARGV[1] events stream cap   ARGV[2] journal cap   ARGV[3] field   ARGV[4] record
-- ARGV[5] what the field must hold ('' for nothing)   ARGV[6] 1 to push the wake-up
-- ARGV[7] the wake-up's ttl (ms)   ARGV[8] the event's field count n, then n field/value
-- pairs (0: no event; type and ts are among them but ts, which this script stamps)
-- Returns {1, record} when written, {0, what the field holds} when not, {-1, ''} when the
-- room is gone.
-- Fails, writing nothing, with BADARG (a cap, the ttl or the event's count not a count,
-- an empty field or record).
-- @include checks
-- @include events
for _, i in ipairs({1, 2, 7, 8}) do
  if count(ARGV[i]) == nil then
    return redis.error_reply('BADARG the caps, the ttl and the event count must be counts')
  end
end
if ARGV[3] == '' or ARGV[4] == '' then
  return redis.error_reply('BADARG a journal record needs its field and its value')
end
local n = tonumber(ARGV[8])
if #ARGV ~= 8 + 2 * n then
  return redis.error_reply('BADARG the event has not the pairs its count says')
end
if not redis.call('HGET', KEYS[1], 'status') then
  return {-1, ''}
end
local held = redis.call('HGET', KEYS[2], ARGV[3]) or ''
if held ~= ARGV[5] then
  return {0, held}
end

-- Every check is done: from here on, writes only.
local ts = event_ts()
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
redis.call('ZADD', KEYS[3], math.floor(tonumber(ts) * 1000), ARGV[3])
local over = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[2])
if over > 0 then
  local oldest = redis.call('ZRANGE', KEYS[3], 0, over - 1)
  redis.call('HDEL', KEYS[2], unpack(oldest))
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, over - 1)
end
if n > 0 then
  local event = {}
  for j = 9, #ARGV do
    table.insert(event, ARGV[j])
  end
  add_event(KEYS[4], ARGV[1], event, ts)
end
if ARGV[6] == '1' then
  redis.call('RPUSH', KEYS[5], '1')
  redis.call('PEXPIRE', KEYS[5], ARGV[7])
end
return {1, ARGV[4]}
