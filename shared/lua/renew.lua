-- Extend a lease, but only for the coordinator that holds it under this epoch.
-- KEYS[1] lease
-- ARGV[1] token "<coordinator id>:<epoch>"   ARGV[2] lease ttl in ms
-- Returns 1 when renewed, 0 when the lease is gone or someone else's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
