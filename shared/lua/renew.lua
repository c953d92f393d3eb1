-- Extend many leases at once, each only for the coordinator that holds it under its epoch
-- (one script for a whole batch: a coordinator renews thousands of leases a period).
-- KEYS[i] lease (on Redis Cluster: all in one hash slot)
-- ARGV[1] lease ttl in ms   ARGV[i + 1] KEYS[i]'s token "<coordinator id>:<epoch>"
-- Returns one entry per key: 1 when renewed, 0 when the lease is gone or someone else's.
local renewed = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i + 1] then
    redis.call('PEXPIRE', key, ARGV[1])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
