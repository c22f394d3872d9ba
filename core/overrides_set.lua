-- Sets entry ARGV[1] to ARGV[2] in the overrides hash KEYS[1] and bumps
-- its version KEYS[2] (see core/overrides.go), unless the hash would hold
-- more than ARGV[3] entries: then replies -(entries)-1 and changes nothing.
-- Replies the new version otherwise.
local n = redis.call('HLEN', KEYS[1])
if n > tonumber(ARGV[3]) or (n == tonumber(ARGV[3]) and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0) then
  return -n - 1
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('INCR', KEYS[2])
