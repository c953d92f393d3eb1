-- Writing a room's events: each entry's fields, then its ts (the server's time).
-- The server's time, unix seconds to the microsecond, as an event's ts.
local function event_ts()
  local time = redis.call('TIME')
  return time[1] .. '.' .. string.format('%06d', tonumber(time[2]))
end
-- Append an event (a flat field/value list, without ts) to the events stream `key`,
-- capped near `cap`; `ts` defaults to now (one ts for every event of a script's write).
local function add_event(key, cap, fields, ts)
  table.insert(fields, 'ts')
  table.insert(fields, ts or event_ts())
  redis.call('XADD', key, 'MAXLEN', '~', cap, '*', unpack(fields))
end
