-- A mention room's speak queue as the scripts that change it read it: its floor:* fields
-- of the state hash (KEYS[2]), each with its value when absent, and the queue_changed
-- event's fields when a change moved it. Included by commit.lua and end_run.lua.
local QUEUE_FIELDS = {'floor:queue', 'floor:listening', 'floor:asked', 'floor:waiting',
  'floor:over'}
local QUEUE_DEFAULTS = {'[]', '[]', '[]', '0', '0'}
local function queue_fields()
  local held = redis.call('HMGET', KEYS[2], unpack(QUEUE_FIELDS))
  for i = 1, #QUEUE_FIELDS do
    if not held[i] or held[i] == '' then
      held[i] = QUEUE_DEFAULTS[i]
    end
  end
  return held
end
-- {'type', 'queue_changed', 'run', run, queue, ..., over} (without ts), or nil when the
-- queue is as it was.
local function queue_changed_event(before, after, run)
  for i = 1, #QUEUE_FIELDS do
    if before[i] ~= after[i] then
      local event = {'type', 'queue_changed', 'run', run}
      for j = 1, #QUEUE_FIELDS do
        table.insert(event, string.sub(QUEUE_FIELDS[j], 7))
        table.insert(event, after[j])
      end
      return event
    end
  end
  return nil
end
