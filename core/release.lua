-- Gives a lease back (see acquire.lua): ARGV id. Replies {1} when the
-- lease was held, {0} when it had expired. Runs after clock.lua.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return {redis.call('ZREM', KEYS[1], ARGV[1])}
