-- Extend many leases at once, each only for the coordinator that holds it under its epoch
-- (one script for a whole batch: a coordinator renews thousands of leases a period), and
-- push the renewed rooms' due times to the leases' expiry, so that other coordinators'
-- scans skip them until this one stops renewing.
-- KEYS[i] lease (on Redis Cluster: all in one hash slot), then runnable when ARGV[4] > 0
-- ARGV[1] lease ttl in ms   ARGV[2] coordinator id   ARGV[3] due time in ms
-- ARGV[4] how many of the first leases get their room's due time pushed (0 on a cluster:
--         runnable is in a slot of its own; the caller pushes them)
-- ARGV[4 + i] KEYS[i]'s epoch
-- A room is its lease key's hash tag: only epochs and keys travel, the tokens and the
-- rooms are made here (a renewal of thousands of leases is mostly its arguments' cost).
-- Returns one entry per lease: 1 when renewed, 0 when the lease is gone or someone else's.
local pushes = tonumber(ARGV[4])
local leases = #KEYS
local runnable = nil
if pushes > 0 then
  leases = #KEYS - 1
  runnable = KEYS[#KEYS]
end
local prefix = ARGV[2] .. ':'
local renewed = {}
for i = 1, leases do
  local key = KEYS[i]
  if redis.call('GET', key) == prefix .. ARGV[4 + i] then
    redis.call('PEXPIRE', key, ARGV[1])
    renewed[i] = 1
    if i <= pushes then
      redis.call('ZADD', runnable, ARGV[3], string.match(key, '{(.-)}'))
    end
  else
    renewed[i] = 0
  end
end
return renewed
