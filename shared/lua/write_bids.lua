-- Append answers to a room's answers stream, unless the room is gone: a call still out
-- when its room was deleted, archived or expired must not bring back a key of it.
-- KEYS[1] state   KEYS[2] answers (bids)
-- ARGV[1] approximate cap of the stream; then, per answer, its field count n and its n
-- field/value pairs
-- Returns the number of answers written (0 when the room is gone).
-- Fails, writing nothing, with BADARG (malformed counts or pairs).
if not string.match(ARGV[1] or '', '^%d+$') or #ARGV[1] > 15 then
  return redis.error_reply('BADARG the cap is not a count')
end
local answers, i = {}, 2
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  if n == nil or n < 1 or n ~= math.floor(n) or i + 2 * n > #ARGV then
    return redis.error_reply('BADARG an answer needs a field count and its pairs')
  end
  local fields = {}
  for j = i + 1, i + 2 * n do
    table.insert(fields, ARGV[j])
  end
  table.insert(answers, fields)
  i = i + 2 * n + 1
end
if not redis.call('HGET', KEYS[1], 'status') then
  return 0
end

-- Every check is done: from here on, writes only.
for _, fields in ipairs(answers) do
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*', unpack(fields))
end
return #answers
