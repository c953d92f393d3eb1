-- A floor policy's room-scoped fields that followers see change (a mention room's speak
-- queue): which they are and the event a change writes come from the policy's record, so
-- no script names a policy. Read before and after a script's writes to the state hash
-- (KEYS[2]). Included by commit.lua and end_run.lua.
-- A watch is nil (nothing watched) or {event = the event's type, fields = {{state field,
-- the event's field, value when absent}, ...}}.
-- Why `watch` is not as above, or nil when it is.
local function watch_problem(watch)
  if watch == nil then
    return nil
  end
  if type(watch) ~= 'table' or type(watch['event']) ~= 'string'
      or type(watch['fields']) ~= 'table' then
    return 'watch is not {event, fields}'
  end
  for _, field in ipairs(watch['fields']) do
    if type(field) ~= 'table' or type(field[1]) ~= 'string' or type(field[2]) ~= 'string'
        or type(field[3]) ~= 'string' then
      return 'watch fields are not [state field, event field, value when absent]'
    end
  end
  return nil
end
-- The watched fields' values now, an absent or empty one as its value when absent.
local function watched_values(watch)
  if watch == nil or #watch['fields'] == 0 then
    return {}
  end
  local names = {}
  for i, field in ipairs(watch['fields']) do
    names[i] = field[1]
  end
  local held = redis.call('HMGET', KEYS[2], unpack(names))
  for i, field in ipairs(watch['fields']) do
    if not held[i] or held[i] == '' then
      held[i] = field[3]
    end
  end
  return held
end
-- {'type', event, 'run', run, field, value, ...} (without ts: every watched field as it is
-- after), or nil when no watched field changed.
local function watched_event(watch, before, after, run)
  for i = 1, #before do
    if before[i] ~= after[i] then
      local event = {'type', watch['event'], 'run', run}
      for j, field in ipairs(watch['fields']) do
        table.insert(event, field[2])
        table.insert(event, after[j])
      end
      return event
    end
  end
  return nil
end
