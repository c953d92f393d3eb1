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
