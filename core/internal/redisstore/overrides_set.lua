-- Sets entry ARGV[1] to ARGV[2] in the overrides hash KEYS[1] and bumps
-- its version KEYS[2] (see overrides/overrides.go and core/internal/redisstore/lend.go), unless the hash would hold
-- more than ARGV[3] entries: then replies -(entries)-1 and changes nothing.
-- KEYS[3] is the set's epoch: written (as ARGV[4]) only when missing, so
-- it is new exactly when the set's history starts again (a first write,
-- or the first after Redis lost the set). KEYS[4] is the id of the last
-- write, ARGV[4] too: a write after a failover that lost the writes before
-- it gets the counter of one of those lost writes, never its id. Replies
-- the new version.
local n = redis.call('HLEN', KEYS[1])
if n > tonumber(ARGV[3]) or (n == tonumber(ARGV[3]) and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0) then
  return -n - 1
end
redis.call('SET', KEYS[3], ARGV[4], 'NX')
redis.call('SET', KEYS[4], ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('INCR', KEYS[2])
