-- take_room(lease, state, events, owner, ttl_ms, events_cap): take one room's lease if
-- nobody holds it, bumping the room's epoch (the fencing token), with a lease_taken event.
-- Returns the new epoch, 0 when another coordinator holds the lease, or an error reply
-- (NOROOM, BADSTATE, OVERFLOW) having written nothing. The caller checks the ttl and cap.
local function take_room(lease, state, events, owner, ttl_ms, events_cap)
  if redis.call('EXISTS', state) == 0 then
    return redis.error_reply('NOROOM the room has no state')
  end
  -- A stale runnable entry (a renewal racing a delete) must not hand an import in
  -- progress, which has no spec yet, to a coordinator.
  if redis.call('HGET', state, 'importing') == '1' then
    return redis.error_reply('NOROOM the room is being imported')
  end
  if redis.call('EXISTS', lease) == 1 then
    return 0
  end
  local previous = redis.call('HGET', state, 'epoch')
  if previous and not string.match(previous, '^%d+$') then
    return redis.error_reply('BADSTATE epoch is not a count')
  end
  local refused = overflow('epoch', previous, 1)
  if refused then
    return refused
  end

  -- Every check is done: from here on, writes only.
  local epoch = redis.call('HINCRBY', state, 'epoch', 1)
  redis.call('SET', lease, owner .. ':' .. epoch, 'PX', ttl_ms)
  add_event(events, events_cap, {'type', 'lease_taken', 'coordinator', owner, 'epoch', epoch})
  return epoch
end
