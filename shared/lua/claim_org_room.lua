-- Count a new room among its organization's live rooms, unless the organization has
-- max_live_rooms already: the check and the count are one step, so creates at once
-- cannot both take the last place. The set is the organization's own key (another
-- Redis Cluster slot than the room's), so this runs before create.lua, and the caller
-- takes the room out again when the create fails; delete takes it out once the room's
-- keys are gone.
-- KEYS[1] the organization's rooms set
-- ARGV[1] room id   ARGV[2] max_live_rooms ('' for no limit)
-- Returns 1 when counted now, 0 when the room was counted already.
-- Fails, writing nothing, with LIMIT <count> (the organization has max_live_rooms rooms
-- or more) or BADARG.
-- @include checks
local room, most = ARGV[1], ARGV[2]
if not room or room == '' then
  return redis.error_reply('BADARG the room id is empty')
end
if most ~= '' and not count(most) then
  return redis.error_reply('BADARG max_live_rooms must be a count or empty')
end
if redis.call('SISMEMBER', KEYS[1], room) == 1 then
  return 0
end
local live = redis.call('SCARD', KEYS[1])
if most ~= '' and live >= count(most) then
  return redis.error_reply('LIMIT ' .. live)
end

-- Every check is done: from here on, writes only.
redis.call('SADD', KEYS[1], room)
return 1
