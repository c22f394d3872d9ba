-- Takes a slot of a concurrency cap (see core/concurrency.go): KEYS[1] is
-- the key's lease set (see leases.lua); ARGV max, lease_ms, id, known,
-- restarted: known is the server process (see incarnation) the limiter
-- last saw on this node and restarted one it knows to have replaced
-- another (0: none). Replies {acquired, held, foreign, inc}: acquired 1
-- when the lease is taken (or was already: an acquisition sent again with
-- its id takes no second slot), 0 when the key is at its cap or in its
-- grace period; held the slots held after it; foreign 1 when the key held
-- a value of another type, which was deleted; inc the server process when
-- the set was missing or known is 0 (0 otherwise: the script did not look).
--
-- The grace period: a set that is missing less than a lease after the
-- server started, on a server the limiter knows restarted (known is
-- another process, or restarted is this one), may have had holders the
-- restart forgot. Until a lease after the start only they take slots, by
-- re-asserting (renew.lua), and newcomers are refused. The marker '~grace'
-- remembers it in the set for every limiter. Runs after clock.lua and
-- leases.lua.
local lease = tonumber(ARGV[2])
local foreign = tidy(lease)
local n = held()
if redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  -- Sent again after an answer that came too late: the lease is ours.
  hold(ARGV[3], lease)
  return {1, n, foreign, 0}
end
local g, inc = tonumber(redis.call('ZSCORE', KEYS[1], GRACE) or '0'), 0
local known, restarted = tonumber(ARGV[4]), tonumber(ARGV[5])
local missing = g == 0 and n == 0
if missing or known == 0 then
  local start
  start, inc = incarnation()
  if missing and start + lease > now and ((known ~= 0 and known ~= inc) or restarted == inc) then
    g = start + lease
    redis.call('ZADD', KEYS[1], g, GRACE)
    redis.call('PEXPIREAT', KEYS[1], g)
  end
end
if now < g then
  return {0, n, foreign, inc}
end
if n >= tonumber(ARGV[1]) then
  return {0, n, foreign, inc}
end
hold(ARGV[3], lease)
return {1, n + 1, foreign, inc}
