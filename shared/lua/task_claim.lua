-- A worker takes a queued task: it runs from now, and its heartbeat starts. A task
-- delivered twice (a send repeated after a coordinator died, a redelivery), cancelled or
-- already finished is not taken.
-- KEYS[1] tasks   ARGV[1] task id   ARGV[2] now (unix s)
-- Returns 1 when taken, else 0.
local id = ARGV[1]
if redis.call('HGET', KEYS[1], id .. ':status') ~= 'queued'
    or redis.call('HGET', KEYS[1], id .. ':cancel') == '1' then
  return 0
end
redis.call('HSET', KEYS[1], id .. ':status', 'running', id .. ':running_at', ARGV[2],
  id .. ':beat_at', ARGV[2])
return 1
