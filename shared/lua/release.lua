-- Give a lease up, so another coordinator can take the room at once.
-- KEYS[1] lease
-- ARGV[1] token "<coordinator id>:<epoch>"
-- Returns 1 when released, 0 when the lease was not this token's (nothing is changed).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
