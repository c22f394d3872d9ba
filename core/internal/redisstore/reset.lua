-- Deletes buckets' state, KEYS (Limiter.Reset: one key; PathRule.Reset: a
-- path's levels, which share their root's slot); replies {n}, how many of
-- them existed. A script keeps the keys' slot, and a Scripter has no DEL.
return {redis.call('DEL', unpack(KEYS))}
