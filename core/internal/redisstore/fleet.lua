-- The fleet heartbeat (see core/fleet.go): announces member ARGV[1] in
-- the sorted set KEYS[1], scored by the server's clock in milliseconds,
-- drops members older than ARGV[2] milliseconds, and replies {members
-- left}. Runs after clock.lua.
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {redis.call('ZCARD', KEYS[1])}
