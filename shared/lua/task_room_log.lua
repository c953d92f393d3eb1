-- Write into a task's room (seed 003's tasks): its conversation, the messages its task was
-- handed, the instruction and its worker's answer, appended after the log's last seq, and
-- what the answer cost, added to the room's totals and its worker's. A task's room runs no
-- turns: this script is the only writer of its log. Written once: when the log's last seq
-- is no longer the one expected, nothing is written (a re-delivered task, a takeover).
-- KEYS[1] state   KEYS[2] log
-- ARGV[1] the last seq expected   ARGV[2] now (unix s)   ARGV[3] the worker agent
-- ARGV[4] prompt tokens   ARGV[5] completion tokens   ARGV[6] cost (USD)
-- ARGV[7 ..] the messages, in (sender, content) pairs
-- Returns the log's last seq once written, 0 when it was written before.
-- Fails, writing nothing, with NOROOM (no such room), BADARG (not a task's room, or
-- malformed arguments) or OVERFLOW.
-- @include checks
local parent, last_seq = unpack(redis.call('HMGET', KEYS[1], 'parent', 'last_seq'))
if not redis.call('HGET', KEYS[1], 'status') then
  return redis.error_reply('NOROOM no such room')
end
if not parent then
  return redis.error_reply('BADARG not a task\'s room: its log is written by its turns')
end
local expected, now = count(ARGV[1]), finite(ARGV[2])
local prompt, completion, cost = count(ARGV[4]), count(ARGV[5]), finite(ARGV[6])
if not expected or not now or not prompt or not completion or not cost or cost < 0
    or (#ARGV - 6) % 2 ~= 0 then
  return redis.error_reply('BADARG the last seq, now, usage and (sender, content) pairs')
end
if (tonumber(last_seq) or 0) ~= expected then
  return 0
end
local messages = (#ARGV - 6) / 2
local over = overflow('last_seq', last_seq, messages) or overflow('prompt_tokens',
  redis.call('HGET', KEYS[1], 'prompt_tokens'), prompt)
if over then
  return over
end

-- Every check is done: from here on, writes only.
local seq = expected
for i = 7, #ARGV, 2 do
  seq = seq + 1
  redis.call('XADD', KEYS[2], seq .. '-0', 'seq', seq, 'sender', ARGV[i], 'content',
    ARGV[i + 1], 'run', 0, 'ts', ARGV[2])
end
redis.call('HSET', KEYS[1], 'last_seq', seq)
for _, prefix in ipairs({'', 'agent:' .. ARGV[3] .. ':'}) do
  redis.call('HINCRBY', KEYS[1], prefix .. 'prompt_tokens', prompt)
  redis.call('HINCRBY', KEYS[1], prefix .. 'completion_tokens', completion)
  redis.call('HINCRBYFLOAT', KEYS[1], prefix .. 'cost_usd', ARGV[6])
end
return seq
