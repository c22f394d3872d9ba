-- Removes entry ARGV[1] from the overrides hash KEYS[1] and bumps its
-- version KEYS[2]; replies the new version, or 0 if there was no entry.
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
return redis.call('INCR', KEYS[2])
