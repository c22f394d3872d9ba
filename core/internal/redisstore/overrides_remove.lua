-- Removes entry ARGV[1] from the overrides hash KEYS[1] and bumps its
-- version KEYS[2]; KEYS[3] takes ARGV[2] as the id of the last write (see
-- overrides_set.lua). Replies the new version, or 0 if there was no entry.
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('SET', KEYS[3], ARGV[2])
return redis.call('INCR', KEYS[2])
