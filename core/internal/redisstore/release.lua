-- Gives a lease back (see acquire.lua): ARGV lease_ms, id. Replies {1,
-- foreign} when the lease was held, {0, foreign} when it had expired or
-- Redis had forgotten it; foreign as in acquire.lua. Runs after clock.lua
-- and leases.lua.
local foreign = tidy(tonumber(ARGV[1]))
return {redis.call('ZREM', KEYS[1], ARGV[2]), foreign}
