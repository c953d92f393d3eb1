-- Ask a person to approve a tool call: write its approval record (pending) and a
-- tool_approval_requested event. Idempotent by id: a call asked again (a takeover, a
-- re-ask, a worker killed while it waited) finds the record its first asking wrote, and
-- nothing is written.
-- KEYS[1] spec   KEYS[2] approvals   KEYS[3] approvals_open   KEYS[4] events
-- ARGV[1] id (the tool call's)   ARGV[2] agent   ARGV[3] tool   ARGV[4] arguments (JSON)
-- ARGV[5] turn   ARGV[6] phase   ARGV[7] timeout (s, > 0)   ARGV[8] events stream cap
-- Returns {1 when written now else 0, then the record's fields in FIELDS order}.
-- Fails, writing nothing, with NOROOM or BADARG (an id that is not 1-200 letters, digits,
-- '.', '_' or '-'; a turn, phase or cap not a count; a timeout not a positive number).
-- @include checks
-- @include events
-- @include approvals
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('NOROOM no such room')
end
local id = ARGV[1]
if not approval_id(id) then
  return redis.error_reply('BADARG the approval id must be 1-200 letters, digits, ., _ or -')
end
if not count(ARGV[5]) or not count(ARGV[6]) then
  return redis.error_reply('BADARG the turn and phase must be counts')
end
local timeout = finite(ARGV[7])
if not timeout or timeout <= 0 then
  return redis.error_reply('BADARG the timeout must be a positive number of seconds')
end
if not count(ARGV[8]) then
  return redis.error_reply(BAD_EVENTS_CAP)
end
if redis.call('HEXISTS', KEYS[2], id .. ':status') == 1 then
  return {0, unpack(approval_fields(KEYS[2], id))}
end

-- Every check is done: from here on, writes only.
local now = server_time()
local requested_at = string.format('%.6f', now)
local expires_at = string.format('%.6f', now + timeout)
redis.call('HSET', KEYS[2], id .. ':agent', ARGV[2], id .. ':tool', ARGV[3],
  id .. ':arguments', ARGV[4], id .. ':turn', ARGV[5], id .. ':phase', ARGV[6],
  id .. ':requested_at', requested_at, id .. ':expires_at', expires_at,
  id .. ':status', 'pending', id .. ':by', '', id .. ':reason', '', id .. ':answered_at', '')
redis.call('ZADD', KEYS[3], math.floor(now * 1000), id)
add_event(KEYS[4], ARGV[8], {'type', 'tool_approval_requested', 'approval_id', id,
  'agent', ARGV[2], 'tool', ARGV[3], 'arguments', ARGV[4], 'turn', ARGV[5], 'phase', ARGV[6],
  'expires_at', expires_at})
return {1, unpack(approval_fields(KEYS[2], id))}
