-- Reads an overrides set. Its version is the epoch KEYS[3], the id of the
-- last write KEYS[4] and the counter KEYS[2], as "epoch.id:counter": a
-- version that cannot come back after Redis lost the set (a new history
-- has a new epoch) or lost its last writes (the next write has a new id,
-- whatever counter it gets). Replies {version} when the version is ARGV[1]
-- (nothing changed); {version, entries} without reading them when the hash
-- KEYS[1] holds more than ARGV[2] entries; otherwise {version, the whole
-- hash}.
local v = (redis.call('GET', KEYS[3]) or '') .. '.' .. (redis.call('GET', KEYS[4]) or '') .. ':' .. (redis.call('GET', KEYS[2]) or '0')
if v == ARGV[1] then
  return {v}
end
local n = redis.call('HLEN', KEYS[1])
if n > tonumber(ARGV[2]) then
  return {v, n}
end
return {v, redis.call('HGETALL', KEYS[1])}
