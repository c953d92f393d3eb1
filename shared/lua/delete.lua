-- Remove a room: every key it has. Refused while a coordinator holds it, unless forced;
-- forced, the lease goes with the rest, so the holder is fenced out: its next fenced write
-- fails (LEASELOST), its lease keeper stops its work at the next renewal, and acquire finds
-- no room (NOROOM). Answers still out find no room either (write_answers.lua).
-- KEYS[1] lease   KEYS[2] state   KEYS[3] inbox   KEYS[4..] the room's other keys
-- ARGV[1] '1' to delete even while a coordinator holds the room, else '0'
-- ARGV[2] '1' to delete only an idle room (no run in progress, no turn open, no post
--         waiting: an expiry), else '0'
-- ARGV[3] state fields the room must still have, as a JSON object ('{}' for any): an
--         archive deletes only the room it wrote
-- ARGV[4] the inbox's newest entry id it must still have ('' for any, '0-0' for none)
-- Returns the number of keys deleted (0 when the room had none).
-- Fails, writing nothing, with HELD <lease> (held and not forced), BUSY <why> (not idle),
-- CHANGED <what> (the room moved on) or BADARG.
local decoded, expected = pcall(cjson.decode, ARGV[3] or '')
if not decoded or type(expected) ~= 'table' then
  return redis.error_reply('BADARG the expected state fields are not a JSON object')
end
local holder = redis.call('GET', KEYS[1])
if holder and ARGV[1] ~= '1' then
  return redis.error_reply('HELD ' .. holder)
end
if ARGV[2] == '1' then
  local state = redis.call('HMGET', KEYS[2], 'status', 'turn_open')
  if state[1] == 'running' then
    return redis.error_reply('BUSY a run is in progress')
  end
  if state[2] == '1' then
    return redis.error_reply('BUSY a turn is open')
  end
  if redis.call('XLEN', KEYS[3]) > 0 then
    return redis.error_reply('BUSY posts are waiting')
  end
end
for field, value in pairs(expected) do
  if (redis.call('HGET', KEYS[2], field) or '') ~= tostring(value) then
    return redis.error_reply('CHANGED ' .. field)
  end
end
if ARGV[4] and ARGV[4] ~= '' then
  local newest = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
  local newest_id = '0-0'
  if #newest > 0 then
    newest_id = newest[1][1]
  end
  if newest_id ~= ARGV[4] then
    return redis.error_reply('CHANGED inbox')
  end
end

-- Every check is done: from here on, writes only.
return redis.call('DEL', unpack(KEYS))
