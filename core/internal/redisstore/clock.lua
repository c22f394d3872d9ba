-- Prelude of the scripts that keep leases and heartbeats: now is the
-- server's clock in milliseconds, so every replica shares one clock.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
