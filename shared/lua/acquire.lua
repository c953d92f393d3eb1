-- Take a room's lease if nobody holds it, bumping the room's epoch (the fencing token).
-- KEYS[1] lease   KEYS[2] state   KEYS[3] events
-- ARGV[1] coordinator id   ARGV[2] lease ttl in ms   ARGV[3] events stream cap
-- Returns the new epoch, or 0 when another coordinator holds the lease. A take writes a
-- lease_taken event (coordinator, epoch).
-- Fails, writing nothing, with NOROOM when the room has no state (it was never created,
-- or was deleted) or is an import still being restored, BADARG when the ttl is not a
-- positive whole number of ms or the cap not a count, BADSTATE when the epoch is not a
-- count, and OVERFLOW when it has reached its limit (lib/checks.lua).
-- @include checks
-- @include events
if redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.error_reply('NOROOM the room has no state')
end
-- A stale runnable entry (a renewal racing a delete) must not hand an import in progress,
-- which has no spec yet, to a coordinator.
if redis.call('HGET', KEYS[2], 'importing') == '1' then
  return redis.error_reply('NOROOM the room is being imported')
end
local ttl = count(ARGV[2])
if not ttl or ttl < 1 then
  return redis.error_reply('BADARG the lease ttl must be a positive whole number of ms')
end
if not count(ARGV[3]) then
  return redis.error_reply(BAD_EVENTS_CAP)
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local previous = redis.call('HGET', KEYS[2], 'epoch')
if previous and not string.match(previous, '^%d+$') then
  return redis.error_reply('BADSTATE epoch is not a count')
end
local refused = overflow('epoch', previous, 1)
if refused then
  return refused
end

-- Every check is done: from here on, writes only.
local epoch = redis.call('HINCRBY', KEYS[2], 'epoch', 1)
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. epoch, 'PX', ARGV[2])
add_event(KEYS[3], ARGV[3], {'type', 'lease_taken', 'coordinator', ARGV[1], 'epoch', epoch})
return epoch
