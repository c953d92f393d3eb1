-- Reserve a room id for an import: none of the room's keys may exist. The state then
-- holds only importing=1, so the id is taken (a create or another import is refused) but
-- the room is not there yet (it has no spec: posts, coordinators and readers find no
-- room) until create.lua, in import mode, completes it.
-- KEYS[1] lease   KEYS[2] state   KEYS[3..] the room's other keys
-- Returns 1. Fails, writing nothing, with EXISTS naming a key that exists.
for _, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    return redis.error_reply('EXISTS ' .. key .. ' exists')
  end
end
redis.call('HSET', KEYS[2], 'importing', 1)
return 1
