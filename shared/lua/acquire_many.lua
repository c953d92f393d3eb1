-- Take the leases of many rooms in one call, each as acquire.lua takes one (a standby
-- takes a dead coordinator's rooms as fast as Redis answers, not a round trip per room).
-- KEYS[3i-2] lease   KEYS[3i-1] state   KEYS[3i] events, of the i-th room (on Redis
-- Cluster: all in one hash slot)
-- ARGV[1] coordinator id   ARGV[2] lease ttl in ms   ARGV[3] events stream cap
-- Returns one entry per room: its new epoch, 0 when another coordinator holds its lease,
-- or the text of the refusal acquire.lua would have answered for it alone (NOROOM,
-- BADSTATE, OVERFLOW ...), that room left as it was; the other rooms are taken all the same.
-- Fails, writing nothing, with BADARG when the keys do not come in threes, the ttl is not
-- a positive whole number of ms or the cap not a count.
-- @include checks
-- @include events
-- @include take
if #KEYS % 3 ~= 0 then
  return redis.error_reply('BADARG the keys must come in threes: lease, state, events')
end
local ttl = count(ARGV[2])
if not ttl or ttl < 1 then
  return redis.error_reply('BADARG the lease ttl must be a positive whole number of ms')
end
if not count(ARGV[3]) then
  return redis.error_reply(BAD_EVENTS_CAP)
end
local taken = {}
for i = 1, #KEYS / 3 do
  local answer = take_room(KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[1], ARGV[2],
    ARGV[3])
  if type(answer) == 'table' then
    answer = answer.err
  end
  taken[i] = answer
end
return taken
