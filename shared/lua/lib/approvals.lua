-- An approval record's fields, kept in the room's approvals hash as `<id>:<field>`
-- (shared/approvals.py's APPROVAL_FIELDS, in the same order).
local FIELDS = {'agent', 'tool', 'arguments', 'turn', 'phase', 'requested_at', 'expires_at',
  'status', 'by', 'reason', 'answered_at'}
-- True when `id` can name an approval: 1-200 letters, digits, '.', '_' or '-' (never ':',
-- which separates it from the field).
local function approval_id(id)
  return type(id) == 'string' and #id >= 1 and #id <= 200
    and string.match(id, '^[%w._-]+$') ~= nil
end
-- The record `id`'s fields in the hash `key`, in FIELDS order ('' for an absent one).
local function approval_fields(key, id)
  local names = {}
  for i, field in ipairs(FIELDS) do
    names[i] = id .. ':' .. field
  end
  local values = redis.call('HMGET', key, unpack(names))
  for i = 1, #FIELDS do
    values[i] = values[i] or ''
  end
  return values
end
-- The server's time, unix seconds (microseconds in the fraction).
local function server_time()
  local time = redis.call('TIME')
  return tonumber(time[1]) + tonumber(time[2]) / 1e6
end
