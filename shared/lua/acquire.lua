-- Take a room's lease if nobody holds it, bumping the room's epoch (the fencing token).
-- KEYS[1] lease   KEYS[2] state
-- ARGV[1] coordinator id   ARGV[2] lease ttl in ms
-- Returns the new epoch, or 0 when another coordinator holds the lease.
-- Fails, writing nothing, with NOROOM when the room has no state (it was never created,
-- or was deleted) and BADARG when the ttl is not a positive whole number of ms.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.error_reply('NOROOM the room has no state')
end
if not string.match(ARGV[2] or '', '^%d+$') or tonumber(ARGV[2]) < 1 then
  return redis.error_reply('BADARG the lease ttl must be a positive whole number of ms')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local epoch = redis.call('HINCRBY', KEYS[2], 'epoch', 1)
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. epoch, 'PX', ARGV[2])
return epoch
