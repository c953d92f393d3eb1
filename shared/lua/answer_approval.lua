-- Answer a pending approval: approved or denied by one of the spec's approvers, or timed
-- out (a denial) once its time is up. The first answer wins; the record then holds it, a
-- tool_approval_answered event tells it, and the id moves from approvals_open to
-- approvals_done (past ARGV[6] answered records, the oldest go, their fields with them).
-- An approval or denial that comes after the record's expires_at times it out instead.
-- KEYS[1] spec   KEYS[2] approvals   KEYS[3] approvals_open   KEYS[4] approvals_done
-- KEYS[5] events
-- ARGV[1] id   ARGV[2] 'approved', 'denied' or 'timed_out'   ARGV[3] by (an approver's
-- name as the spec spells it; '' for timed_out)   ARGV[4] reason   ARGV[5] events stream
-- cap   ARGV[6] how many answered records to keep
-- Returns {outcome, then the record's fields in FIELDS order, as it is now}; outcome is
-- 'answered' (this answer was written), 'timed_out' (its time was up: written as timed
-- out), 'closed' (it was answered already: nothing written) or 'early' (timed_out asked
-- before its time is up: nothing written).
-- Fails, writing nothing, with NOROOM, NOAPPROVAL (no such id), NOTAPPROVER <the spec's
-- approvers, comma-separated> or BADARG.
-- @include checks
-- @include events
-- @include approvals
local spec_json = redis.call('HGET', KEYS[1], 'json')
if not spec_json then
  return redis.error_reply('NOROOM no such room')
end
local id, verdict, by = ARGV[1], ARGV[2], ARGV[3]
if verdict ~= 'approved' and verdict ~= 'denied' and verdict ~= 'timed_out' then
  return redis.error_reply('BADARG the verdict must be approved, denied or timed_out')
end
if not count(ARGV[5]) or not count(ARGV[6]) then
  return redis.error_reply('BADARG the events cap and the records kept must be counts')
end
if not approval_id(id) or redis.call('HEXISTS', KEYS[2], id .. ':status') == 0 then
  return redis.error_reply('NOAPPROVAL no such approval')
end
if verdict ~= 'timed_out' then
  local decoded, spec = pcall(cjson.decode, spec_json)
  local approvers = decoded and type(spec) == 'table' and spec['approvers'] or {}
  local names, found = {}, false
  if type(approvers) == 'table' then
    for _, name in ipairs(approvers) do
      if type(name) == 'string' then
        table.insert(names, name)
        found = found or name == by
      end
    end
  end
  if not found then
    return redis.error_reply('NOTAPPROVER ' .. table.concat(names, ', '))
  end
end
local record = approval_fields(KEYS[2], id)
if record[8] ~= 'pending' then
  return {'closed', unpack(record)}
end
local now = server_time()
local expires_at = tonumber(record[7]) or 0
local outcome, reason = 'answered', ARGV[4]
if now >= expires_at then
  outcome, verdict, by = 'timed_out', 'timed_out', ''
  -- The wait it was given, to the millisecond (its two times are written to the µs).
  local waited = math.floor((expires_at - (tonumber(record[6]) or 0)) * 1000 + 0.5) / 1000
  reason = 'no approver answered within ' .. string.format('%g', waited) .. 's'
elseif verdict == 'timed_out' then
  return {'early', unpack(record)}
end

-- Every check is done: from here on, writes only.
local answered_at = string.format('%.6f', now)
redis.call('HSET', KEYS[2], id .. ':status', verdict, id .. ':by', by, id .. ':reason', reason,
  id .. ':answered_at', answered_at)
redis.call('ZREM', KEYS[3], id)
redis.call('ZADD', KEYS[4], math.floor(now * 1000), id)
local extra = redis.call('ZCARD', KEYS[4]) - tonumber(ARGV[6])
if extra > 0 then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[4], 0, extra - 1)) do
    for _, field in ipairs(FIELDS) do
      redis.call('HDEL', KEYS[2], old .. ':' .. field)
    end
  end
  redis.call('ZREMRANGEBYRANK', KEYS[4], 0, extra - 1)
end
add_event(KEYS[5], ARGV[5], {'type', 'tool_approval_answered', 'approval_id', id,
  'agent', record[1], 'tool', record[2], 'status', verdict,
  'approved', verdict == 'approved' and '1' or '0', 'by', by, 'reason', reason})
return {outcome, unpack(approval_fields(KEYS[2], id))}
