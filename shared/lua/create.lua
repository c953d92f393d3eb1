-- Create a room, all or nothing: its spec hash and its state hash.
-- KEYS[1] state   KEYS[2] spec   KEYS[3] log
-- ARGV[1] mode: 'new' (the id must be free) or 'import' (reserve.lua reserved the id and
--         the log was restored; its newest entry must be the state's last_seq)
-- ARGV[2] n, the number of spec field/value pairs; ARGV[3 .. 2+2n] the spec's pairs; the
--         rest the state's pairs (a 'new' room's starting state, or an archived one)
-- Returns 1. Fails, writing nothing, with EXISTS (the id is taken), NOTRESERVED (an import
-- the id was not reserved for), BADARG (malformed pairs, no status) or BADSTATE (import:
-- last_seq is not a count, or the log's newest seq is not last_seq).
local mode = ARGV[1]
if mode ~= 'new' and mode ~= 'import' then
  return redis.error_reply('BADARG mode must be new or import')
end
local n = tonumber(ARGV[2])
if n == nil or n < 1 or n ~= math.floor(n) or 2 + 2 * n > #ARGV or (#ARGV - 2 - 2 * n) % 2 ~= 0 then
  return redis.error_reply('BADARG spec and state need field/value pairs')
end
local spec, state, status, last_seq = {}, {}, nil, '0'
for i = 3, 2 + 2 * n do
  table.insert(spec, ARGV[i])
end
for i = 3 + 2 * n, #ARGV, 2 do
  table.insert(state, ARGV[i])
  table.insert(state, ARGV[i + 1])
  if ARGV[i] == 'status' then
    status = ARGV[i + 1]
  elseif ARGV[i] == 'last_seq' then
    last_seq = ARGV[i + 1]
  end
end
if status == nil or status == '' then
  return redis.error_reply('BADARG the state needs a status')
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return redis.error_reply('EXISTS the room exists')
end
if mode == 'new' then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply('EXISTS the room exists')
  end
else
  if redis.call('HGET', KEYS[1], 'importing') ~= '1' or redis.call('HLEN', KEYS[1]) ~= 1 then
    return redis.error_reply('NOTRESERVED the room id was not reserved for an import')
  end
  if not string.match(last_seq, '^%d+$') or #last_seq > 15 then
    return redis.error_reply('BADSTATE last_seq is not a count')
  end
  local top = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
  local top_seq = 0
  if #top > 0 then
    top_seq = tonumber(string.match(top[1][1], '^(%d+)'))
  end
  if top_seq ~= tonumber(last_seq) then
    return redis.error_reply('BADSTATE the log ends at seq ' .. top_seq .. ', the state at ' .. last_seq)
  end
end

-- Every check is done: from here on, writes only.
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], unpack(spec))
redis.call('HSET', KEYS[1], unpack(state))
return 1
