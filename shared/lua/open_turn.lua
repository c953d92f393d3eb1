-- Open the room's next turn: fix its number, deadline and transcript snapshot, and note
-- where in the bids stream its bids start, so that a coordinator taking over can resume it.
-- KEYS[1] lease   KEYS[2] state   KEYS[3] bids
-- ARGV[1] lease token   ARGV[2] deadline (unix s)   ARGV[3] now (unix s)
-- Returns {turn, snapshot seq, bids stream id the turn's bids come after}.
-- Fails with LEASELOST when the token no longer holds the lease, TURNOPEN when a turn is
-- already open (resume it instead). Nothing is written on failure.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('LEASELOST open refused')
end
if redis.call('HGET', KEYS[2], 'turn_open') == '1' then
  return redis.error_reply('TURNOPEN a turn is already open')
end
local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
local bids_from = '0-0'
if #last > 0 then
  bids_from = last[1][1]
end
local turn = redis.call('HINCRBY', KEYS[2], 'turn', 1)
redis.call('HINCRBY', KEYS[2], 'run_turns', 1)
local snapshot = redis.call('HGET', KEYS[2], 'last_seq') or '0'
redis.call('HSET', KEYS[2], 'turn_open', 1, 'turn_deadline', ARGV[2], 'turn_opened_at', ARGV[3],
  'turn_snapshot_seq', snapshot, 'turn_bids_from', bids_from)
return {turn, tonumber(snapshot), bids_from}
