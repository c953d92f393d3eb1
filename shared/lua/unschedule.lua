-- Take a room off the runnable set, but only if its due time is still the one the
-- caller read: a post moves it to "now", so a post that raced with the caller's last
-- look at the inbox keeps the room runnable (no lost wake-up).
-- Touches only the global runnable set, so it runs unchanged on a Redis Cluster.
-- KEYS[1] runnable
-- ARGV[1] room   ARGV[2] the due time read before the last drain ('' for absent)
-- Returns 1 when the room left the set (or was not in it, as expected), 0 when its due
-- time changed meanwhile (nothing is written then).
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  if ARGV[2] == '' then
    return 1
  end
  return 0
end
if ARGV[2] == '' or tonumber(score) ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
