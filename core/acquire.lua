-- Takes a slot of a concurrency cap (see core/concurrency.go): KEYS[1] is
-- the key's sorted set of leases, each scored by the millisecond it
-- expires unless renewed; ARGV max, lease_ms, id. Replies {1, held} when
-- the lease is taken (or was already: an acquisition sent again with its
-- id takes no second slot), {0, held} when the key is at its cap. Runs
-- after clock.lua.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
local lease = tonumber(ARGV[2])
if redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  -- Sent again after an answer that came too late: the lease is ours.
  redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
  return {1, held}
end
if held >= tonumber(ARGV[1]) then
  return {0, held}
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
if redis.call('PTTL', KEYS[1]) < lease then
  redis.call('PEXPIRE', KEYS[1], lease)
end
return {1, held + 1}
