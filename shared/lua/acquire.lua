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
-- @include take
local ttl = count(ARGV[2])
if not ttl or ttl < 1 then
  return redis.error_reply('BADARG the lease ttl must be a positive whole number of ms')
end
if not count(ARGV[3]) then
  return redis.error_reply(BAD_EVENTS_CAP)
end
return take_room(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3])
