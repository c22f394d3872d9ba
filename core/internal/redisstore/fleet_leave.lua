-- Removes member ARGV[1] from the fleet KEYS[1] (a Scripter has no ZREM);
-- replies {1} if it was there, {0} if not.
return {redis.call('ZREM', KEYS[1], ARGV[1])}
