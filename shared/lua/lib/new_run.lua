-- Start a new run in the state hash `key`, as a post to an idle room does: the run's own
-- fields start again (its totals at 0), and the policy's per-run fields (policy:*) and
-- the run's trace (run_traceparent, trace) go.
-- The caller sets run and messages_in_run.
local function start_run(key)
  redis.call('HSET', key, 'status', 'running', 'run_turns', 0, 'recent', '[]',
    'stop_reason', '', 'stop_detail', '', 'answer', '', 'failed_takes', 0,
    'run_prompt_tokens', 0, 'run_completion_tokens', 0, 'run_cost_usd', 0)
  redis.call('HDEL', key, 'run_traceparent', 'trace')
  for _, field in ipairs(redis.call('HKEYS', key)) do
    if string.sub(field, 1, 7) == 'policy:' then
      redis.call('HDEL', key, field)
    end
  end
end

-- Start a run in the state hash `key` when the room has none in progress (`status`, its
-- state's status, is not running): the next run number after `run`, its messages counted
-- from 0, and its run_started event in `events` (capped at `cap`). The caller has checked
-- the run number against its limit (lib/checks.lua, overflow). Needs lib/events.lua.
local function start_run_if_idle(key, status, run, events, cap)
  if status == 'running' then
    return
  end
  local next_run = (tonumber(run or '0') or 0) + 1
  start_run(key)
  redis.call('HSET', key, 'run', next_run, 'messages_in_run', 0)
  add_event(events, cap, {'type', 'run_started', 'run', next_run})
end
