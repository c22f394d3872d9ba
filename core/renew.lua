-- Renews a lease (see acquire.lua): ARGV lease_ms, id. Replies {1} when
-- the lease was renewed, {0} when it had expired (or was released). Runs
-- after clock.lua.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local lease = tonumber(ARGV[1])
if redis.call('ZADD', KEYS[1], 'XX', 'CH', now + lease, ARGV[2]) == 0 and not redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  return {0}
end
if redis.call('PTTL', KEYS[1]) < lease then
  redis.call('PEXPIRE', KEYS[1], lease)
end
return {1}
