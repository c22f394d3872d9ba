-- Sets a key's warning marker (core.Rule.WithWarning), once per window
-- across the fleet. KEYS[1] is the marker (see WarnKey), in its bucket's
-- slot; ARGV[1] the window in milliseconds, at least 1. Replies {1, 0}
-- when this call set it: the caller raises the threshold event; else
-- {0, ms}, how long the marker set before still holds. A marker without
-- an expiry is not one this script wrote: it is replaced, and the call
-- counts as the first.
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  return {0, ttl}
end
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
return {1, 0}
